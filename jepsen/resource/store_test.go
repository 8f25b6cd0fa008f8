package resource_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/recordlock/recordlock/jepsen/resource"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func fenced(t uint64) resource.Token { return resource.Token{Value: t, Fenced: true} }

// The fencing rule: a request with a token below the highest seen is refused and changes
// nothing; an equal or higher one is served and raises the highest; reads raise it too.
func TestStoreFencing(t *testing.T) {
	s := resource.NewStore()
	require.NoError(t, s.Write("k", 1, fenced(5)))
	require.ErrorIs(t, s.Write("k", 2, fenced(4)), resource.ErrStaleToken)
	v, err := s.Read("k", resource.Token{})
	require.NoError(t, err)
	assert.Equal(t, int64(1), v, "a refused write changed the register")

	require.NoError(t, s.Write("k", 3, fenced(5)), "an equal token is a later write of the same holder")
	_, err = s.Read("k", fenced(7))
	require.NoError(t, err)
	require.ErrorIs(t, s.Write("k", 4, fenced(6)), resource.ErrStaleToken, "a read with token 7 did not fence out token 6")
	_, err = s.Read("k", fenced(6))
	require.ErrorIs(t, err, resource.ErrStaleToken)

	require.NoError(t, s.Write("other", 9, fenced(1)), "tokens are per key")
	require.NoError(t, s.Write("k", 8, resource.Token{}), "an unfenced write is always applied")
	v, err = s.Read("k", fenced(7))
	require.NoError(t, err)
	assert.Equal(t, int64(8), v)
}

func TestHandlerRoundTrip(t *testing.T) {
	srv := httptest.NewServer(resource.Handler(resource.NewStore()))
	defer srv.Close()
	c := resource.NewClient(strings.TrimPrefix(srv.URL, "http://"))
	defer c.HTTP.CloseIdleConnections()
	ctx := context.Background()

	require.NoError(t, c.Write(ctx, "k", 42, fenced(3)))
	require.ErrorIs(t, c.Write(ctx, "k", 43, fenced(2)), resource.ErrStaleToken)
	v, err := c.Read(ctx, "k", fenced(3))
	require.NoError(t, err)
	assert.Equal(t, int64(42), v)
	_, err = c.Read(ctx, "k", fenced(1))
	require.ErrorIs(t, err, resource.ErrStaleToken)
	_, err = c.Read(ctx, "", resource.Token{})
	require.Error(t, err, "a request without a key is refused")
	assert.NotErrorIs(t, err, resource.ErrStaleToken)
}

// A shared read is checked against the last fenced write, not the highest token: readers on two
// nodes hold the key at once with different tokens, and the one with the lower token still reads,
// until a write with a higher token lands. It raises the highest token as a read does.
func TestStoreSharedRead(t *testing.T) {
	s := resource.NewStore()
	require.NoError(t, s.Write("k", 1, fenced(5)))
	_, err := s.ReadShared("k", fenced(9))
	require.NoError(t, err)
	v, err := s.ReadShared("k", fenced(7))
	require.NoError(t, err, "a reader below another reader's token but not below the last write's")
	assert.Equal(t, int64(1), v)
	_, err = s.ReadShared("k", fenced(4))
	require.ErrorIs(t, err, resource.ErrStaleToken, "a reader below the last write's token")

	require.ErrorIs(t, s.Write("k", 2, fenced(8)), resource.ErrStaleToken, "a shared read with token 9 did not fence out token 8")
	require.NoError(t, s.Write("k", 3, fenced(10)))
	_, err = s.ReadShared("k", fenced(9))
	require.ErrorIs(t, err, resource.ErrStaleToken, "a reader that lost its lock read a later writer's value")

	v, err = s.ReadShared("k", resource.Token{})
	require.NoError(t, err, "an unfenced shared read is always served")
	assert.Equal(t, int64(3), v)
	require.NoError(t, s.Write("k", 4, resource.Token{}))
	_, err = s.ReadShared("k", fenced(10))
	require.NoError(t, err, "an unfenced write does not move the last write's token")
}

// WriteAll applies all of its writes or none, each checked against its own key's tokens.
func TestStoreWriteAll(t *testing.T) {
	s := resource.NewStore()
	require.NoError(t, s.WriteAll([]resource.Write{{Key: "a", Value: 10, Token: fenced(3)}, {Key: "b", Value: 20, Token: fenced(5)}}))
	_, err := s.Read("b", fenced(6))
	require.NoError(t, err)

	err = s.WriteAll([]resource.Write{{Key: "a", Value: 11, Token: fenced(4)}, {Key: "b", Value: 21, Token: fenced(4)}})
	require.ErrorIs(t, err, resource.ErrStaleToken, "b has seen token 6")
	err = s.WriteAll([]resource.Write{{Key: "a", Value: 12, Token: fenced(7)}, {Key: "a", Value: 13, Token: fenced(7)}})
	require.ErrorIs(t, err, resource.ErrKeyTwice)
	for k, want := range map[string]int64{"a": 10, "b": 20} {
		v, err := s.Read(k, resource.Token{})
		require.NoError(t, err)
		assert.Equal(t, want, v, "a refused WriteAll changed %s", k)
	}
	_, err = s.ReadShared("a", fenced(3))
	require.NoError(t, err, "a refused WriteAll moved the last write's token")

	require.NoError(t, s.WriteAll([]resource.Write{{Key: "a", Value: 14, Token: fenced(6)}, {Key: "b", Value: 24, Token: fenced(6)}}))
	_, err = s.ReadShared("a", fenced(5))
	require.ErrorIs(t, err, resource.ErrStaleToken, "WriteAll did not record its token as a's last write")
	_, err = s.ReadShared("b", fenced(5))
	require.ErrorIs(t, err, resource.ErrStaleToken, "WriteAll did not record its token as b's last write")
}

func TestHandlerSharedReadAndWriteAll(t *testing.T) {
	srv := httptest.NewServer(resource.Handler(resource.NewStore()))
	defer srv.Close()
	c := resource.NewClient(strings.TrimPrefix(srv.URL, "http://"))
	defer c.HTTP.CloseIdleConnections()
	ctx := context.Background()

	require.NoError(t, c.WriteAll(ctx, []resource.Write{{Key: "a", Value: 7, Token: fenced(3)}, {Key: "b", Value: -2, Token: fenced(4)}}))
	require.ErrorIs(t, c.WriteAll(ctx, []resource.Write{{Key: "a", Value: 8, Token: fenced(5)}, {Key: "b", Value: 9, Token: fenced(2)}}), resource.ErrStaleToken)
	require.NoError(t, c.WriteAll(ctx, []resource.Write{{Key: "c", Value: 1}}), "an unfenced write-all")
	for k, want := range map[string]int64{"a": 7, "b": -2, "c": 1} {
		v, err := c.ReadShared(ctx, k, fenced(4))
		require.NoError(t, err)
		assert.Equal(t, want, v, k)
	}
	_, err := c.ReadShared(ctx, "b", fenced(3))
	require.ErrorIs(t, err, resource.ErrStaleToken)

	err = c.WriteAll(ctx, []resource.Write{{Key: "a", Value: 1, Token: fenced(9)}, {Key: "b", Value: 1}})
	require.Error(t, err, "a token for some keys only is refused")
	assert.NotErrorIs(t, err, resource.ErrStaleToken)
	err = c.WriteAll(ctx, []resource.Write{{Key: "a", Value: 1}, {Key: "a", Value: 2}})
	require.Error(t, err, "a key written twice is refused")
	assert.NotErrorIs(t, err, resource.ErrStaleToken)
	v, err := c.Read(ctx, "a", resource.Token{})
	require.NoError(t, err)
	assert.Equal(t, int64(7), v, "a refused write-all changed a")
}
