module github.com/recordlock/recordlock/bench

go 1.26

require (
	github.com/linxGnu/grocksdb v1.9.8
	github.com/moby/locker v1.0.1
	github.com/recordlock/recordlock v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.11.1
	go.uber.org/goleak v1.3.0
	golang.org/x/perf v0.0.0-20260709024250-82a0b07e230d
)

require (
	github.com/aclements/go-moremath v0.0.0-20210112150236-f10218a38794 // indirect
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

replace github.com/recordlock/recordlock => ../
