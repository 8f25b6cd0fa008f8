package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/recordlock/recordlock/jepsen/harness"
	"github.com/recordlock/recordlock/jepsen/nemesis"
	"github.com/recordlock/recordlock/jepsen/node"
)

// minOps is how many operations each system must complete (ok or failed) for a run to count.
const minOps = 1000

// minBankOps is how many reads and how many transfers of the bank each system must complete (ok
// or failed) for a run to count.
const minBankOps = 200

// Report is jepsen-report.json.
type Report struct {
	Seed        uint64              `json:"seed"`
	EtcdMembers int                 `json:"etcd_members"`
	Nodes       int                 `json:"nodes"`
	ClientsPer  int                 `json:"clients_per_node"`
	Keys        []string            `json:"keys"`
	BankClients int                 `json:"bank_clients_per_node"`
	Accounts    []string            `json:"accounts"`
	Balance     int64               `json:"opening_balance"`
	TTLSeconds  float64             `json:"etcd_ttl_s"`
	Schedule    []nemesis.Fault     `json:"schedule"`
	Runs        []harness.RunReport `json:"runs"`
	Pass        bool                `json:"pass"`
	Failures    []string            `json:"failures,omitempty"`
	Out         string              `json:"out"`
}

func runTest(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("jepsen", flag.ExitOnError)
	dur := fs.Duration("time", 5*time.Minute, "how long each system runs")
	seed := fs.Uint64("seed", 0, "the schedule's seed (0: drawn from the clock)")
	etcdBin := fs.String("etcd", "bin/etcd", "the etcd server binary")
	reportPath := fs.String("report", "jepsen-report.json", "where the report goes")
	out := fs.String("out", "jepsen-out", "where histories, logs and visualizations go")
	nodes := fs.Int("nodes", 3, "node processes")
	clients := fs.Int("clients", 3, "clients per node")
	ttl := fs.Duration("ttl", 2*time.Second, "etcd lease TTL of the nodes")
	bankClients := fs.Int("bank-clients", 2, "bank clients per node (0: no bank workload)")
	systems := fs.String("systems", node.Recordlock+","+node.EtcdMutex,
		"the system under test, then the control (recordlock-no-token: recordlock without the token)")
	_ = fs.Parse(args)
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano()%1_000_000) + 1
	}
	self, err := os.Executable()
	if err != nil {
		log.Print(err)
		return 2
	}
	if err := os.RemoveAll(*out); err != nil {
		log.Print(err)
		return 2
	}
	rep := Report{Seed: *seed, EtcdMembers: 3, Nodes: *nodes, ClientsPer: *clients,
		Keys: []string{"k0", "k1", "k2", "k3", "k4", "k5"}, TTLSeconds: ttl.Seconds(), Out: *out,
		BankClients: *bankClients, Accounts: []string{"acct0", "acct1", "acct2", "acct3", "acct4"}, Balance: 100}
	rep.Schedule = nemesis.Schedule(*seed, nemesis.Config{Duration: *dur, Nodes: *nodes, TTL: *ttl,
		Warmup: 3 * time.Second, Settle: 3 * time.Second})
	log.Printf("seed %d: %d faults in %v per system", *seed, len(rep.Schedule), *dur)

	ps := harness.NewProcs()
	defer ps.KillAll()
	for _, system := range strings.Split(*systems, ",") {
		dir := filepath.Join(*out, system)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			log.Print(err)
			return 2
		}
		r, err := harness.Run(ctx, ps, harness.Config{
			System: system, Self: self, EtcdBin: *etcdBin, Dir: dir, Members: rep.EtcdMembers,
			Nodes: *nodes, Clients: *clients, Keys: rep.Keys, TTL: *ttl, Lease: time.Second,
			Hold: 120 * time.Millisecond, Seed: *seed, Duration: *dur, Schedule: rep.Schedule,
			NodeGrace: 10 * time.Second, BankClients: rep.BankClients, Accounts: rep.Accounts, Balance: rep.Balance,
		}, *out)
		ps.KillAll()
		if err != nil {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s: %v", system, err))
		}
		rep.Runs = append(rep.Runs, r)
		if ctx.Err() != nil {
			break
		}
	}
	rep.Failures = append(rep.Failures, judge(rep.Runs)...)
	rep.Pass = len(rep.Failures) == 0
	b, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(*reportPath, append(b, '\n'), 0o644); err != nil {
		log.Print(err)
	}
	for _, f := range rep.Failures {
		log.Print("FAIL: ", f)
	}
	fmt.Println(finalLine(rep.Runs))
	if !rep.Pass {
		return 1
	}
	return 0
}

// judge returns every condition of a passing run that runs do not meet.
func judge(runs []harness.RunReport) []string {
	var fails []string
	if len(runs) != 2 {
		return append(fails, fmt.Sprintf("%d of 2 systems ran", len(runs)))
	}
	rl, ctl := runs[0], runs[1]
	if !rl.Linearizable {
		fails = append(fails, rl.System+": history not linearizable")
	}
	if rl.LostUpdates > 0 {
		fails = append(fails, fmt.Sprintf("%s: %d lost updates", rl.System, rl.LostUpdates))
	}
	if rl.NodeCrashes > 0 {
		fails = append(fails, fmt.Sprintf("%s: nodes exited %d times on their own", rl.System, rl.NodeCrashes))
	}
	if ctl.Violations == 0 {
		fails = append(fails, ctl.System+": no violation seen, so the harness has not shown it can see one")
	}
	if b := rl.Bank; b.Violations > 0 {
		fails = append(fails, fmt.Sprintf("%s: bank: %d violations", rl.System, b.Violations))
		for _, r := range b.BadReads[:min(len(b.BadReads), 5)] { // the report has more
			fails = append(fails, fmt.Sprintf("%s: bank: %s, not %d", rl.System, r, b.Total))
		}
		if b.FinalTotal != b.Total {
			fails = append(fails, fmt.Sprintf("%s: bank: the accounts ended with %d, not %d", rl.System, b.FinalTotal, b.Total))
		}
	}
	for _, r := range runs {
		if done := r.OK + r.Failed; done < minOps {
			fails = append(fails, fmt.Sprintf("%s: %d operations completed, fewer than %d", r.System, done, minOps))
		}
		if b := r.Bank; b.Accounts != nil && (b.Reads+b.ReadsFailed < minBankOps || b.Transfers+b.TransfersFailed < minBankOps) {
			fails = append(fails, fmt.Sprintf("%s: bank: %d reads and %d transfers completed, fewer than %d each",
				r.System, b.Reads+b.ReadsFailed, b.Transfers+b.TransfersFailed, minBankOps))
		}
		for kind, n := range r.Faults {
			if n == 0 {
				fails = append(fails, fmt.Sprintf("%s: no %s fault fired", r.System, kind))
			}
		}
		for _, e := range r.FaultErrors {
			fails = append(fails, fmt.Sprintf("%s: fault: %s", r.System, e))
		}
	}
	return fails
}

func finalLine(runs []harness.RunReport) string {
	get := func(i int, system string) harness.RunReport {
		if i < len(runs) {
			return runs[i]
		}
		return harness.RunReport{System: system} // it did not run
	}
	rl, ctl := get(0, node.Recordlock), get(1, node.EtcdMutex)
	bank := func(r harness.RunReport) string {
		return fmt.Sprintf("bank %d reads, %d transfers, %d violations", r.Bank.Reads, r.Bank.Transfers, r.Bank.Violations)
	}
	return fmt.Sprintf("jepsen: %s %d ops, %d faults, %d violations, %s, %d deadlocks broken; %s %d ops, %d violations, %s",
		rl.System, rl.Ops, rl.FaultCount(), rl.Violations, bank(rl), rl.Bank.Deadlocks, ctl.System, ctl.Ops, ctl.Violations, bank(ctl))
}
