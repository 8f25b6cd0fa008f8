package history_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/recordlock/recordlock/jepsen/history"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// op is an OK operation of client c on key k over [call, ret] that read value and wrote id.
func op(c int, id, value int64, token uint64, call, ret int64) history.Op {
	return history.Op{ID: id, Client: c, Key: "k", Call: call, Return: ret, Read: true, Value: value, Token: token, Outcome: history.OK}
}

func TestCheckSequentialHistoryPasses(t *testing.T) {
	ops := []history.Op{op(0, 1, 0, 5, 0, 10), op(1, 2, 1, 5, 11, 20), op(0, 3, 2, 6, 21, 30)}
	r := history.Check(ops, map[string]int64{"k": 3}, time.Minute)
	assert.True(t, r.Linearizable)
	assert.Zero(t, r.LostUpdates)
	assert.Zero(t, r.Violations())
}

// The control's failure: a paused holder read 0, another holder read 0 and wrote 2 meanwhile,
// then the paused one wrote 1 over it. Both were acknowledged; 2 is lost.
func TestCheckFindsStaleWrite(t *testing.T) {
	ops := []history.Op{op(0, 1, 0, 0, 0, 100), op(1, 2, 0, 0, 10, 20), op(1, 3, 1, 0, 110, 120)}
	r := history.Check(ops, map[string]int64{"k": 3}, time.Minute)
	assert.False(t, r.Linearizable)
	assert.Equal(t, []int64{2}, r.Lost)
	assert.Equal(t, 1, r.Violations())

	path := filepath.Join(t.TempDir(), "v.html")
	require.NoError(t, history.Visualize(r, path))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(b), "read 0, write 2")
}

// A write that took effect with a lower token than one already applied is a violation of the
// fenced register even when the values chain up.
func TestCheckFindsTokenGoingBack(t *testing.T) {
	ops := []history.Op{op(0, 1, 0, 7, 0, 10), op(1, 2, 1, 6, 11, 20)}
	r := history.Check(ops, map[string]int64{"k": 2}, time.Minute)
	assert.False(t, r.Linearizable)
	assert.Zero(t, r.LostUpdates)
	assert.Equal(t, 1, r.Violations())
}

// An Unknown operation may have applied, at any time after its call, or not at all; Fail
// operations never applied and are left out.
func TestCheckUnknownAndFailed(t *testing.T) {
	unknown := op(2, 9, 1, 5, 12, 15)
	unknown.Outcome = history.Unknown
	failed := op(3, 8, 1, 4, 12, 13)
	failed.Outcome = history.Fail
	applied := []history.Op{op(0, 1, 0, 5, 0, 10), unknown, failed, op(1, 2, 9, 5, 20, 30)}
	r := history.Check(applied, map[string]int64{"k": 2}, time.Minute)
	assert.True(t, r.Linearizable, "the unknown write applied")
	assert.Zero(t, r.LostUpdates)

	notApplied := []history.Op{op(0, 1, 0, 5, 0, 10), unknown, op(1, 2, 1, 5, 20, 30)}
	r = history.Check(notApplied, map[string]int64{"k": 2}, time.Minute)
	assert.True(t, r.Linearizable, "the unknown write never applied")

	r = history.Check([]history.Op{op(0, 1, 0, 5, 0, 10), failed, op(1, 2, 8, 5, 20, 30)}, map[string]int64{"k": 2}, time.Minute)
	assert.False(t, r.Linearizable, "a later read saw the write of a failed operation")
}

func TestAssembleKilledOperations(t *testing.T) {
	events := []history.Event{
		{Op: 1, Key: "k", Phase: history.Invoke, Time: 1},
		{Op: 2, Key: "k", Phase: history.Invoke, Time: 2},
		{Op: 1, Key: "k", Phase: history.Read, Time: 3, Value: 0, Token: 4},
		{Op: 3, Key: "k", Phase: history.Invoke, Time: 4},
		{Op: 3, Key: "k", Phase: history.Complete, Time: 5, Outcome: history.OK},
	}
	ops, err := history.Assemble(events)
	require.NoError(t, err)
	require.Len(t, ops, 3)
	assert.Equal(t, history.Unknown, ops[0].Outcome, "killed after its read: its write may have been sent")
	assert.Equal(t, int64(math.MaxInt64), ops[0].Return)
	assert.Equal(t, uint64(4), ops[0].Token)
	assert.Equal(t, history.Fail, ops[1].Outcome, "killed before its read: it sent no write")
	assert.Equal(t, history.OK, ops[2].Outcome)
	assert.Equal(t, history.Counts{OK: 1, Fail: 1, Unknown: 1,
		Causes: map[string]int{"killed after its read": 1, "killed before its read": 1}}, history.Count(ops))

	_, err = history.Assemble([]history.Event{{Op: 1, Phase: history.Complete}})
	require.Error(t, err)
}

func TestLogRoundTripAndCutLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	l, err := history.OpenLog(path)
	require.NoError(t, err)
	want := history.Event{Op: 7, Client: 2, Key: "k", Phase: history.Read, Time: 9, Token: 3, Value: 5}
	require.NoError(t, l.Append(want))
	require.NoError(t, l.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)

	got, err := history.ReadEvents(strings.NewReader(string(b) + `{"op":8,"cli`))
	require.NoError(t, err, "a last line cut by a kill is dropped")
	assert.Equal(t, []history.Event{want}, got)

	_, err = history.ReadEvents(strings.NewReader(`{"op":8,"cli` + "\n" + string(b)))
	require.Error(t, err, "a bad line before the last is an error")
}
