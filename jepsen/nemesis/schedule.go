// Package nemesis draws the harness's fault schedule from a seed: the same seed gives the same
// faults at the same offsets, so both systems of a run meet the same schedule and a failing
// seed can be rerun.
package nemesis

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The kinds of fault, each healed at the end of its Fault.For.
const (
	// Pause stops a node with SIGSTOP for less than the etcd TTL, then SIGCONT.
	Pause Kind = "pause"
	// LongPause stops a node for longer than the etcd TTL, so that its etcd lease expires
	// while it is stopped, then SIGCONT.
	LongPause Kind = "pause_longer_than_ttl"
	// Kill sends a node SIGKILL and restarts it on its files.
	Kill Kind = "kill"
	// LeaderKill sends the etcd leader SIGKILL and restarts it on its files.
	LeaderKill Kind = "etcd_leader_kill"
	// Partition blackholes a node's traffic to and from every etcd member, for longer than
	// the TTL.
	Partition Kind = "partition"
	// Delay adds latency to a node's traffic to and from etcd.
	Delay Kind = "delay"
)

// Kinds lists every kind of fault; a schedule holds each at least once.
var Kinds = []Kind{Pause, LongPause, Kill, LeaderKill, Partition, Delay}

// Fault is one fault: it starts At the offset from the start of the run, on Node (for faults
// of a node), lasts For, and then is healed. Latency is the delay a Delay fault adds.
type Fault struct {
	At      time.Duration
	Kind    Kind
	Node    int
	For     time.Duration
	Latency time.Duration
}

// MarshalJSON writes the durations as Go durations ("4.382s"), as the harness logs them.
func (f Fault) MarshalJSON() ([]byte, error) {
	type fault struct {
		At      string `json:"at"`
		Kind    Kind   `json:"kind"`
		Node    int    `json:"node"`
		For     string `json:"for"`
		Latency string `json:"latency,omitempty"`
	}
	j := fault{At: f.At.String(), Kind: f.Kind, Node: f.Node, For: f.For.String()}
	if f.Latency > 0 {
		j.Latency = f.Latency.String()
	}
	return json.Marshal(j)
}

func (f Fault) String() string {
	s := fmt.Sprintf("%v %s node %d for %v", f.At, f.Kind, f.Node, f.For)
	if f.Latency > 0 {
		s += fmt.Sprintf(" (+%v)", f.Latency)
	}
	return s
}

// Config is what a schedule depends on besides its seed.
type Config struct {
	Duration time.Duration // the run's length; every fault is healed Settle before it ends
	Nodes    int           // faults of a node pick one of 0..Nodes-1
	TTL      time.Duration // the nodes' etcd lease TTL
	Warmup   time.Duration // no fault before this offset
	Settle   time.Duration // no fault after Duration - Settle
}

// Schedule returns the faults for seed under cfg, one at a time with a quiet gap after each.
// The first faults are every kind and two more long pauses, in an order drawn from the seed, so
// that a run long enough for one round (57 s with a 2 s TTL) meets each kind and three long
// pauses; after them each fault is a long pause (the fault that breaks a lock without fencing)
// with probability one half, and any other kind otherwise.
func Schedule(seed uint64, cfg Config) []Fault {
	rng := rand.New(rand.NewPCG(seed, 0x6a657073656e)) // "jepsen"
	var faults []Fault
	first := append(slices.Clone(Kinds), LongPause, LongPause)
	rng.Shuffle(len(first), func(a, b int) { first[a], first[b] = first[b], first[a] })
	others := slices.DeleteFunc(slices.Clone(Kinds), func(k Kind) bool { return k == LongPause })
	at := cfg.Warmup
	end := cfg.Duration - cfg.Settle
	for i := 0; ; i++ {
		var kind Kind
		if i < len(first) {
			kind = first[i]
		} else if rng.IntN(2) == 0 {
			kind = LongPause
		} else {
			kind = others[rng.IntN(len(others))]
		}
		f := Fault{At: at, Kind: kind, Node: rng.IntN(cfg.Nodes)}
		switch kind {
		case Pause:
			f.For = between(rng, 300*time.Millisecond, cfg.TTL/2)
		case LongPause:
			f.For = cfg.TTL + between(rng, 1500*time.Millisecond, 3*time.Second)
		case Kill:
			f.For = between(rng, 500*time.Millisecond, 2*time.Second)
		case LeaderKill:
			f.Node = 0
			f.For = between(rng, time.Second, 3*time.Second)
		case Partition:
			f.For = cfg.TTL + between(rng, time.Second, 2*time.Second)
		case Delay:
			f.For = between(rng, 2*time.Second, 4*time.Second)
			f.Latency = between(rng, 50*time.Millisecond, 300*time.Millisecond)
		}
		if f.At+f.For > end {
			return faults
		}
		faults = append(faults, f)
		// A fault's effects outlast it by up to a TTL (a lock of a killed or cut-off holder
		// stays taken until its lease expires): the next starts once the system has recovered.
		at = f.At + f.For + cfg.TTL + between(rng, 500*time.Millisecond, 1500*time.Millisecond)
	}
}

// between returns a duration in [lo, hi), rounded to the millisecond.
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	d := lo + time.Duration(rng.Int64N(int64(hi-lo)))
	return d.Round(time.Millisecond)
}
