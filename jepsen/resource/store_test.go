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
