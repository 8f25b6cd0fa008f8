package recordlock_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

func TestHolderVersions(t *testing.T) {
	_, l := manual(t, openDB(t))
	h, err := l.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err)
	a := h.AcquiredAt()

	assert.Equal(t, a, h.HolderVersionCandidate(0), "the first candidate is AcquiredAt")
	assert.Equal(t, a+100, h.HolderVersionCandidate(a+100), "a floor raises the candidate")
	assert.Equal(t, a, h.HolderVersionCandidate(a-100), "never below AcquiredAt")
	assert.Equal(t, a, h.HolderVersionCandidate(0), "a candidate changes nothing")

	assert.Equal(t, a, h.NextHolderVersion())
	assert.Equal(t, a+1, h.NextHolderVersion())
	assert.Equal(t, a+2, h.HolderVersionCandidate(0))

	h.NoteCandidateFloor(a + 50)
	assert.Equal(t, a+50, h.HolderVersionCandidate(0))
	h.NoteCandidateFloor(a + 10)
	assert.Equal(t, a+50, h.HolderVersionCandidate(0), "the floor never lowers")
	assert.Equal(t, a+50, h.NextHolderVersion())
	assert.Equal(t, a+51, h.NextHolderVersion(), "the floor alone is not a write")

	h.NoteHolderVersion(a + 10)
	assert.Equal(t, a+52, h.HolderVersionCandidate(0), "noting a lower version never lowers it")
	h.NoteHolderVersion(a + 1000)
	assert.Equal(t, a+1001, h.HolderVersionCandidate(0))
	assert.Equal(t, a+2000, h.HolderVersionCandidate(a+2000))
	assert.Equal(t, a+1001, h.NextHolderVersion())
	require.True(t, h.Release())

	// Noting a version on a fresh handle counts as issued.
	h, err = l.TryLock([]byte("k2"), recordlock.Options{})
	require.NoError(t, err)
	b := h.AcquiredAt()
	h.NoteHolderVersion(b + 5)
	assert.Equal(t, b+6, h.NextHolderVersion())
	require.True(t, h.Release())
}
