package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/recordlock/recordlock/jepsen/history"
	"github.com/recordlock/recordlock/jepsen/nemesis"
)

// RunReport is one system's part of the report.
type RunReport struct {
	System    string `json:"system"`
	DurationS int    `json:"duration_s"`
	Ops       int    `json:"ops"`
	OK        int    `json:"ok"`
	Failed    int    `json:"failed"`
	Unknown   int    `json:"unknown"`
	// Causes counts the failed and unknown operations by why they were.
	Causes       map[string]int `json:"causes"`
	Faults       map[string]int `json:"faults"`
	Linearizable bool           `json:"linearizable"`
	CheckTimeout bool           `json:"check_timed_out,omitempty"`
	LostUpdates  int            `json:"lost_updates"`
	Violations   int            `json:"violations"`
	NodeCrashes  int            `json:"node_crashes"`
	// Visualization is porcupine's HTML view of a history that is not linearizable.
	Visualization string `json:"visualization,omitempty"`
	// LostOps are the first lost updates' operation IDs, to look up in the histories.
	LostOps []int64 `json:"lost_ops,omitempty"`
	// FaultErrors are faults that could not be applied or healed.
	FaultErrors []string `json:"fault_errors,omitempty"`
	// Bank is the bank workload's count and check; its BadReads are the first 20.
	Bank history.BankResult `json:"bank"`
}

// FaultCount is how many faults the run applied.
func (r RunReport) FaultCount() int {
	n := 0
	for _, c := range r.Faults {
		n += c
	}
	return n
}

// Run runs cfg.System for cfg.Duration under cfg.Schedule and checks its history. outDir
// receives the visualization of a failure.
func Run(ctx context.Context, ps *Procs, cfg Config, outDir string) (RunReport, error) {
	rep := RunReport{System: cfg.System, DurationS: int(cfg.Duration / time.Second), Faults: map[string]int{}}
	for _, k := range nemesis.Kinds {
		rep.Faults[string(k)] = 0
	}
	c, err := Start(ctx, ps, cfg)
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	if err != nil {
		return rep, err
	}
	start := time.Now()
	log.Printf("%s: running for %v", cfg.System, cfg.Duration)
	for _, f := range cfg.Schedule {
		if !sleepUntil(ctx, start.Add(f.At)) {
			break
		}
		heal, err := c.Apply(ctx, f)
		if err != nil {
			rep.FaultErrors = append(rep.FaultErrors, fmt.Sprintf("%v: %v", f, err))
			continue
		}
		rep.Faults[string(f.Kind)]++
		log.Printf("%s: %v", cfg.System, f)
		sleepUntil(ctx, start.Add(f.At+f.For)) // healed even when ctx is done
		if err := heal(); err != nil {
			rep.FaultErrors = append(rep.FaultErrors, fmt.Sprintf("heal %v: %v", f, err))
		}
	}
	sleepUntil(ctx, start.Add(cfg.Duration))
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	rep.NodeCrashes = c.StopNodes()
	final, err := c.FinalValues(ctx, cfg.Keys)
	if err != nil {
		return rep, err
	}
	balances, err := c.FinalValues(ctx, cfg.Accounts)
	if err != nil {
		return rep, err
	}
	c.Close()
	if err := c.RemoveData(); err != nil {
		return rep, err
	}
	c = nil

	if cfg.BankClients > 0 {
		bank, err := readLogs(cfg, "bank", history.ReadBankEvents)
		if err != nil {
			return rep, err
		}
		bops, err := history.AssembleBank(bank)
		if err != nil {
			return rep, err
		}
		rep.Bank = history.CheckBank(bops, cfg.Accounts, cfg.Balance*int64(len(cfg.Accounts)), balances)
		rep.Bank.BadReads = rep.Bank.BadReads[:min(len(rep.Bank.BadReads), 20)]
		log.Printf("%s: bank: %d reads, %d transfers, %d violations, %d deadlocks broken", cfg.System,
			rep.Bank.Reads, rep.Bank.Transfers, rep.Bank.Violations, rep.Bank.Deadlocks)
	}

	events, err := readLogs(cfg, "history", history.ReadEvents)
	if err != nil {
		return rep, err
	}
	ops, err := history.Assemble(events)
	if err != nil {
		return rep, err
	}
	n := history.Count(ops)
	rep.Ops, rep.OK, rep.Failed, rep.Unknown, rep.Causes = len(ops), n.OK, n.Fail, n.Unknown, n.Causes
	log.Printf("%s: checking %d operations", cfg.System, len(ops))
	res := history.Check(ops, final, 3*time.Minute)
	rep.Linearizable, rep.CheckTimeout, rep.LostUpdates = res.Linearizable, res.TimedOut, res.LostUpdates
	rep.Violations = res.Violations()
	rep.LostOps = res.Lost[:min(len(res.Lost), 20)]
	if !res.Linearizable {
		rep.Visualization = filepath.Join(outDir, cfg.System+".html")
		if err := history.Visualize(res, rep.Visualization); err != nil {
			return rep, errors.Join(errors.New("visualization"), err)
		}
	}
	return rep, nil
}

// readLogs reads every node's log of the kind (node-N.kind.jsonl) with read.
func readLogs[E any](cfg Config, kind string, read func(io.Reader) ([]E, error)) ([]E, error) {
	var events []E
	for i := range cfg.Nodes {
		f, err := os.Open(filepath.Join(cfg.Dir, fmt.Sprintf("node-%d.%s.jsonl", i, kind)))
		if err != nil {
			return nil, err
		}
		ev, err := read(f)
		f.Close()
		if err != nil {
			return nil, err
		}
		events = append(events, ev...)
	}
	return events, nil
}

// sleepUntil sleeps until t or ctx is done, and reports whether it reached t.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}
