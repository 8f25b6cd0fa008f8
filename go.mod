module github.com/recordlock/recordlock

go 1.26.8

require github.com/linxGnu/grocksdb v1.7.15

require github.com/stretchr/testify v1.11.1 // indirect
