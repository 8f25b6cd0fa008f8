package history

import (
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// Result is what the checker found in one run's history.
type Result struct {
	// Linearizable is porcupine's verdict over the OK and Unknown operations; false as well when
	// the check timed out.
	Linearizable bool
	// TimedOut says porcupine gave up before deciding.
	TimedOut bool
	// LostUpdates counts OK operations whose write no later operation read and that is not the
	// key's final value: a write that another write replaced without having seen it.
	LostUpdates int
	// Lost lists the IDs of those operations.
	Lost []int64
	// Info is what porcupine.VisualizePath draws.
	Info porcupine.LinearizationInfo
}

// Violations is the number of violations Result reports: the lost updates, or 1 when the
// history is not linearizable and no update was lost.
func (r Result) Violations() int {
	if r.LostUpdates > 0 {
		return r.LostUpdates
	}
	if !r.Linearizable {
		return 1
	}
	return 0
}

// Check runs porcupine over ops with the given timeout and counts lost updates against final,
// each key's value read at the end of the run.
func Check(ops []Op, final map[string]int64, timeout time.Duration) Result {
	var history []porcupine.Operation
	for _, op := range ops {
		if op.Outcome == Fail {
			continue
		}
		ret := op.Return
		if op.Outcome == Unknown {
			ret = math.MaxInt64 // its write may land at any time after its call
		}
		history = append(history, porcupine.Operation{ClientId: op.Client, Input: op, Call: op.Call, Output: op.Outcome, Return: ret})
	}
	res, info := porcupine.CheckOperationsVerbose(Model, history, timeout)
	r := Result{Linearizable: res == porcupine.Ok, TimedOut: res == porcupine.Unknown, Info: info}
	r.Lost = lostUpdates(ops, final)
	r.LostUpdates = len(r.Lost)
	return r
}

// lostUpdates returns the OK operations whose written value no operation that may have written
// read, and that is not its key's final value.
func lostUpdates(ops []Op, final map[string]int64) []int64 {
	seen := make(map[int64]bool)
	for _, op := range ops {
		if op.Read && op.Outcome != Fail {
			seen[op.Value] = true
		}
	}
	for _, v := range final {
		seen[v] = true
	}
	var lost []int64
	for _, op := range ops {
		if op.Outcome == OK && !seen[op.ID] {
			lost = append(lost, op.ID)
		}
	}
	return lost
}

// Visualize writes porcupine's HTML view of the check to path.
func Visualize(r Result, path string) error {
	return porcupine.VisualizePath(Model, r.Info, path)
}
