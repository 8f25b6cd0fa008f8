package harness_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/recordlock/recordlock/jepsen/harness"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gone reports whether pid has exited (a zombie waiting for its reaper counts as exited).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	for range 500 {
		if gone(pid) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d is still running", pid)
}

// KillAll kills the whole process group of each process it started, stopped or not, so that
// no child of theirs outlives the harness.
func TestKillAllKillsProcessGroups(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child")
	ps := harness.NewProcs()
	p, err := ps.Start("sh", "/bin/sh", []string{"-c", "sleep 60 & echo $! > " + pidFile + "; wait"}, filepath.Join(dir, "log"))
	require.NoError(t, err)
	var child int
	for range 500 {
		if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
			child, err = strconv.Atoi(strings.TrimSpace(string(b)))
			require.NoError(t, err)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.NotZero(t, child, "the child never started")
	require.NoError(t, p.Signal(syscall.SIGSTOP))
	ps.KillAll()
	assert.True(t, p.Exited())
	assert.Zero(t, p.Unplanned(), "a kill the harness asked for is not an unplanned exit")
	waitGone(t, child)
}

// Stop resumes a stopped process before asking it to end; one that exits by itself counts as
// unplanned.
func TestStopAndUnplannedExit(t *testing.T) {
	dir := t.TempDir()
	ps := harness.NewProcs()
	defer ps.KillAll()
	p, err := ps.Start("sleep", "/bin/sleep", []string{"60"}, filepath.Join(dir, "log"))
	require.NoError(t, err)
	require.NoError(t, p.Signal(syscall.SIGSTOP))
	p.Stop(10 * time.Second)
	assert.True(t, p.Exited())
	assert.Zero(t, p.Unplanned())

	q, err := ps.Start("true", "/bin/true", nil, filepath.Join(dir, "log"))
	require.NoError(t, err)
	for range 500 {
		if q.Exited() {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.True(t, q.Exited())
	assert.Equal(t, 1, q.Unplanned())
}
