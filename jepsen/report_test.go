package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/recordlock/recordlock/jepsen/harness"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func passing() []harness.RunReport {
	faults := func() map[string]int {
		return map[string]int{"pause": 1, "pause_longer_than_ttl": 2, "kill": 1, "etcd_leader_kill": 1, "partition": 1, "delay": 1}
	}
	return []harness.RunReport{
		{System: "recordlock", Ops: 1200, OK: 1100, Failed: 100, Faults: faults(), Linearizable: true},
		{System: "etcd-mutex", Ops: 1300, OK: 1250, Failed: 50, Faults: faults(), Linearizable: false, LostUpdates: 2, Violations: 2},
	}
}

func TestJudge(t *testing.T) {
	assert.Empty(t, judge(passing()))
	assert.Equal(t, "jepsen: recordlock 1200 ops, 7 faults, 0 violations; etcd-mutex 1300 ops, 2 violations", finalLine(passing()))

	for name, breakIt := range map[string]func(r []harness.RunReport){
		"recordlock not linearizable": func(r []harness.RunReport) { r[0].Linearizable = false },
		"recordlock lost an update":   func(r []harness.RunReport) { r[0].LostUpdates = 1 },
		"a recordlock node crashed":   func(r []harness.RunReport) { r[0].NodeCrashes = 1 },
		"the control saw nothing":     func(r []harness.RunReport) { r[1].Violations = 0 },
		"too few operations":          func(r []harness.RunReport) { r[1].OK, r[1].Failed = 900, 99 },
		"a fault kind never fired":    func(r []harness.RunReport) { r[0].Faults["kill"] = 0 },
		"a fault failed":              func(r []harness.RunReport) { r[1].FaultErrors = []string{"x"} },
	} {
		r := passing()
		breakIt(r)
		assert.NotEmpty(t, judge(r), name)
	}
	assert.NotEmpty(t, judge(passing()[:1]), "one system ran")
	assert.Equal(t, "jepsen: recordlock 1200 ops, 7 faults, 0 violations; etcd-mutex 0 ops, 0 violations", finalLine(passing()[:1]))
}
