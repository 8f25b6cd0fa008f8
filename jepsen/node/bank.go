package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/jepsen/history"
	"github.com/recordlock/recordlock/jepsen/resource"
)

// maxAmount is the most a transfer moves.
const maxAmount = 20

// bankWorker is one bank client: half its operations read every account, half are transfers.
type bankWorker struct {
	cfg        Config
	lock       lock
	res        *resource.Client
	log        *history.Log
	client     int // the node's client number, after its register clients
	lockClient int // the client as lock knows it
	rng        *rand.Rand
	idBase     int64
	n          int64
}

// op runs one operation and records its invoke and completion. Like the register clients' ops,
// its requests are bounded by timeouts rather than the run's ctx.
func (w *bankWorker) op() {
	w.n++
	e := history.BankEvent{Op: w.idBase + w.n, Kind: history.Transfer}
	if w.rng.IntN(2) == 0 {
		e.Kind = history.BankRead
	}
	e.Phase = history.Invoke
	w.record(e)
	e.Phase = history.Complete
	var err error
	if e.Kind == history.BankRead {
		err = w.read(&e)
	} else {
		err = w.transfer(&e)
	}
	if err != nil {
		e.Error = err.Error()
	}
	w.record(e)
	if e.Outcome == history.Fail {
		time.Sleep(10 * time.Millisecond) // as a register client after a failure
	}
}

// read locks every account shared, reads each with its token inside the fence of every lock,
// waiting a little between reads (a reader's work, in which a transfer may come), and fills in
// e: what it read, with which tokens, and how it ended.
func (w *bankWorker) read(e *history.BankEvent) error {
	accounts := w.cfg.Accounts
	waits := make([]time.Duration, len(accounts))
	for i := 1; i < len(waits); i++ {
		waits[i] = time.Duration(w.rng.Int64N(int64(w.cfg.Hold) / int64(len(accounts))))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	h, err := retry(e, func() (heldAll, error) { return w.lock.lockAll(ctx, w.lockClient, accounts, true) })
	if err != nil {
		e.Outcome, e.Cause = history.Fail, lockAllCause(err)
		return err
	}
	defer h.release()
	toks := h.tokens()
	e.Accounts, e.Tokens = accounts, tokenValues(toks)
	err = h.fence(func() error {
		for i, a := range accounts {
			time.Sleep(waits[i])
			v, err := w.res.ReadShared(context.Background(), a, toks[i])
			if err != nil {
				return err
			}
			e.Values = append(e.Values, v)
		}
		return nil
	})
	switch {
	case err == nil:
		e.Outcome = history.OK
	case errors.Is(err, recordlock.ErrLeaseExpired) && len(e.Values) == 0:
		e.Outcome, e.Cause = history.Fail, "read not sent: lease expired"
	case errors.Is(err, resource.ErrStaleToken):
		e.Outcome, e.Cause = history.Fail, "read refused: stale token"
	default:
		e.Outcome, e.Cause = history.Fail, "read failed"
	}
	return err
}

// transfer locks two accounts exclusive, reads both with their tokens, and inside the fence of
// both locks waits up to Hold and writes both at once, moving up to maxAmount (no more than the
// source holds) from one to the other. It fills in e.
//
// A third of the transfers, where the lock allows it, lock the source and then the destination
// with a Lock each, so that two of them in opposite directions wait for each other in a cycle,
// on one node or across nodes, and so can one of them and a LockAll of a read or another
// transfer, which locks both in key order.
func (w *bankWorker) transfer(e *history.BankEvent) error {
	accounts := w.cfg.Accounts
	i, j := w.rng.IntN(len(accounts)), w.rng.IntN(len(accounts)-1)
	if j >= i {
		j++
	}
	from, to := accounts[i], accounts[j]
	want := 1 + w.rng.Int64N(maxAmount)
	hold := time.Duration(w.rng.Int64N(int64(w.cfg.Hold)))
	each, canEach := w.lock.(eachLocker)
	e.Unordered = w.rng.IntN(3) == 0 && canEach // drawn for every system, so both see the same choices
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	keys := []string{from, to}
	var h heldAll
	var err error
	if e.Unordered {
		h, err = retry(e, func() (heldAll, error) { return each.lockEach(ctx, w.lockClient, keys) })
	} else {
		slices.Sort(keys)
		h, err = retry(e, func() (heldAll, error) { return w.lock.lockAll(ctx, w.lockClient, keys, false) })
	}
	if err != nil {
		e.Outcome, e.Cause = history.Fail, lockAllCause(err)
		return err
	}
	defer h.release()
	toks := h.tokens()
	if keys[0] != from {
		toks[0], toks[1] = toks[1], toks[0]
	}
	e.Accounts, e.Tokens = []string{from, to}, tokenValues(toks)
	for k, a := range e.Accounts {
		v, err := w.res.Read(context.Background(), a, toks[k])
		if errors.Is(err, resource.ErrStaleToken) {
			e.Outcome, e.Cause = history.Fail, "read refused: stale token"
			return err
		} else if err != nil {
			e.Outcome, e.Cause = history.Fail, "read failed"
			return err
		}
		e.Values = append(e.Values, v)
	}
	e.Amount = max(0, min(want, e.Values[0]))
	sent := false
	err = h.fence(func() error {
		time.Sleep(hold)
		sent = true
		return w.res.WriteAll(context.Background(), []resource.Write{
			{Key: from, Value: e.Values[0] - e.Amount, Token: toks[0]},
			{Key: to, Value: e.Values[1] + e.Amount, Token: toks[1]},
		})
	})
	switch {
	case err == nil:
		e.Outcome = history.OK
	case errors.Is(err, recordlock.ErrLeaseExpired) && !sent:
		e.Outcome, e.Cause = history.Fail, "write not sent: lease expired"
	case errors.Is(err, resource.ErrStaleToken):
		e.Outcome, e.Cause = history.Fail, "write refused: stale token"
	case !sent:
		e.Outcome, e.Cause = history.Fail, "write not sent"
	default:
		e.Outcome, e.Cause = history.Unknown, "write unanswered"
	}
	return err
}

// retry calls try, which holds nothing when it fails, again at once each time it fails as a
// deadlock's victim, until it succeeds or fails otherwise (its ctx bounds the whole), and counts
// the deadlocks in e.
func retry(e *history.BankEvent, try func() (heldAll, error)) (heldAll, error) {
	for {
		h, err := try()
		var de *recordlock.DeadlockError
		if !errors.As(err, &de) {
			return h, err
		}
		e.Deadlocks++
		if len(de.Cycle) > 0 && de.Cycle[0].Node != "" { // a coordinator names the nodes
			e.DeadlocksAcrossNodes++
		}
	}
}

// lockAllCause names why a lockAll failed.
func lockAllCause(err error) string {
	if errors.Is(err, recordlock.ErrLeaseExpired) {
		return "lock: a lease ended while LockAll waited for the next key"
	}
	return lockCause(err)
}

func tokenValues(toks []resource.Token) []uint64 {
	vs := make([]uint64, len(toks))
	for i, t := range toks {
		vs[i] = t.Value
	}
	return vs
}

func (w *bankWorker) record(e history.BankEvent) {
	e.Node, e.Client, e.Time = w.cfg.Index, w.client, time.Now().UnixNano()
	if err := w.log.AppendBank(e); err != nil {
		panic(fmt.Sprintf("node: bank log: %v", err)) // a log with a hole cannot be checked
	}
}
