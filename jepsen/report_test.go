package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/recordlock/recordlock/jepsen/harness"
	"github.com/recordlock/recordlock/jepsen/history"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func passing() []harness.RunReport {
	faults := func() map[string]int {
		return map[string]int{"pause": 1, "pause_longer_than_ttl": 2, "kill": 1, "etcd_leader_kill": 1, "partition": 1, "delay": 1}
	}
	bank := func() history.BankResult {
		return history.BankResult{Accounts: []string{"a", "b"}, Total: 200, FinalTotal: 200,
			Reads: 300, ReadsFailed: 10, Transfers: 250, TransfersFailed: 5, Unordered: 80, Deadlocks: 12, DeadlocksAcrossNodes: 7}
	}
	return []harness.RunReport{
		{System: "recordlock", Ops: 1200, OK: 1100, Failed: 100, Faults: faults(), Linearizable: true, Bank: bank()},
		{System: "etcd-mutex", Ops: 1300, OK: 1250, Failed: 50, Faults: faults(), Linearizable: false, LostUpdates: 2, Violations: 2, Bank: bank()},
	}
}

func TestJudge(t *testing.T) {
	assert.Empty(t, judge(passing()))
	assert.Equal(t, "jepsen: recordlock 1200 ops, 7 faults, 0 violations, bank 300 reads, 250 transfers, 0 violations, 12 deadlocks broken; "+
		"etcd-mutex 1300 ops, 2 violations, bank 300 reads, 250 transfers, 0 violations", finalLine(passing()))
	r := passing()
	r[1].Bank.Violations, r[1].Bank.FinalTotal = 1, 190
	assert.Empty(t, judge(r), "the control's bank is reported, not judged")
	r = passing()
	r[0].Bank, r[1].Bank = history.BankResult{}, history.BankResult{}
	assert.Empty(t, judge(r), "a run without the bank workload")

	for name, breakIt := range map[string]func(r []harness.RunReport){
		"recordlock not linearizable": func(r []harness.RunReport) { r[0].Linearizable = false },
		"recordlock lost an update":   func(r []harness.RunReport) { r[0].LostUpdates = 1 },
		"a recordlock node crashed":   func(r []harness.RunReport) { r[0].NodeCrashes = 1 },
		"the control saw nothing":     func(r []harness.RunReport) { r[1].Violations = 0 },
		"too few operations":          func(r []harness.RunReport) { r[1].OK, r[1].Failed = 900, 99 },
		"a fault kind never fired":    func(r []harness.RunReport) { r[0].Faults["kill"] = 0 },
		"a fault failed":              func(r []harness.RunReport) { r[1].FaultErrors = []string{"x"} },
		"a recordlock read was off": func(r []harness.RunReport) {
			r[0].Bank.Violations = 1
			r[0].Bank.BadReads = []history.BadRead{{Op: 7, Accounts: []string{"a", "b"}, Values: []int64{90, 100}, Tokens: []uint64{3, 3}, Sum: 190}}
		},
		"recordlock's accounts ended off": func(r []harness.RunReport) { r[0].Bank.Violations, r[0].Bank.FinalTotal = 1, 210 },
		"too few bank reads":              func(r []harness.RunReport) { r[1].Bank.Reads = 150 },
		"too few transfers":               func(r []harness.RunReport) { r[0].Bank.Transfers = 150 },
	} {
		r := passing()
		breakIt(r)
		assert.NotEmpty(t, judge(r), name)
	}
	assert.NotEmpty(t, judge(passing()[:1]), "one system ran")
	assert.Equal(t, "jepsen: recordlock 1200 ops, 7 faults, 0 violations, bank 300 reads, 250 transfers, 0 violations, 12 deadlocks broken; "+
		"etcd-mutex 0 ops, 0 violations, bank 0 reads, 0 transfers, 0 violations", finalLine(passing()[:1]))
}

// A violation of the bank names the read: its node, its values and its tokens.
func TestJudgeNamesBadRead(t *testing.T) {
	r := passing()
	r[0].Bank.Violations, r[0].Bank.FinalTotal = 2, 210
	r[0].Bank.BadReads = []history.BadRead{{Op: 7, Node: 2, Client: 4, Accounts: []string{"a", "b"}, Values: []int64{90, 100}, Tokens: []uint64{3, 5}, Sum: 190}}
	assert.Equal(t, []string{
		"recordlock: bank: 2 violations",
		"recordlock: bank: read 7 on node 2 (client 4): a=90 (token 3) b=100 (token 5), sum 190, not 200",
		"recordlock: bank: the accounts ended with 210, not 200",
	}, judge(r))
}

func TestJudgeNamesFiveBadReads(t *testing.T) {
	r := passing()
	r[0].Bank.Violations = 7
	for i := range 7 {
		r[0].Bank.BadReads = append(r[0].Bank.BadReads, history.BadRead{Op: int64(i)})
	}
	assert.Len(t, judge(r), 1+5, "the count and the first five reads")
}
