package resource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Handler serves s over HTTP:
//
//	GET  /read?key=K[&token=T]          200 with the value, or 409 for a stale token
//	POST /write?key=K&value=V[&token=T] 204, or 409 for a stale token
//
// A request without token is unfenced.
func Handler(s *Store) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /read", func(w http.ResponseWriter, r *http.Request) {
		key, tok, err := parse(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		v, err := s.Read(key, tok)
		if reply(w, err) {
			fmt.Fprint(w, v)
		}
	})
	mux.HandleFunc("POST /write", func(w http.ResponseWriter, r *http.Request) {
		key, tok, err := parse(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		v, err := strconv.ParseInt(r.URL.Query().Get("value"), 10, 64)
		if err != nil {
			http.Error(w, "bad value: "+err.Error(), http.StatusBadRequest)
			return
		}
		if reply(w, s.Write(key, v, tok)) {
			w.WriteHeader(http.StatusNoContent)
		}
	})
	return mux
}

func parse(r *http.Request) (string, Token, error) {
	q := r.URL.Query()
	key := q.Get("key")
	if key == "" {
		return "", Token{}, errors.New("no key")
	}
	t := q.Get("token")
	if t == "" {
		return key, Token{}, nil
	}
	v, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return "", Token{}, fmt.Errorf("bad token: %w", err)
	}
	return key, Token{Value: v, Fenced: true}, nil
}

// reply writes a 409 for a stale token and reports whether the request was served.
func reply(w http.ResponseWriter, err error) bool {
	if errors.Is(err, ErrStaleToken) {
		http.Error(w, err.Error(), http.StatusConflict)
		return false
	}
	return true
}

// Client calls a resource process's Handler.
type Client struct {
	Base string // http://host:port
	HTTP *http.Client
}

// NewClient returns a Client of the resource at addr (host:port).
func NewClient(addr string) *Client {
	return &Client{Base: "http://" + addr, HTTP: &http.Client{Timeout: 5 * time.Second}}
}

// Read returns key's value; ErrStaleToken when the resource refused tok.
func (c *Client) Read(ctx context.Context, key string, tok Token) (int64, error) {
	body, err := c.do(ctx, http.MethodGet, "read", key, tok, nil)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(body), 10, 64)
}

// Write sets key's value; ErrStaleToken when the resource refused tok. Any other error leaves
// unknown whether the write was applied.
func (c *Client) Write(ctx context.Context, key string, value int64, tok Token) error {
	_, err := c.do(ctx, http.MethodPost, "write", key, tok, url.Values{"value": {strconv.FormatInt(value, 10)}})
	return err
}

func (c *Client) do(ctx context.Context, method, path, key string, tok Token, q url.Values) (string, error) {
	if q == nil {
		q = url.Values{}
	}
	q.Set("key", key)
	if tok.Fenced {
		q.Set("token", strconv.FormatUint(tok.Value, 10))
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+"/"+path+"?"+q.Encode(), nil)
	if err != nil {
		return "", err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusNoContent:
		return string(b), nil
	case http.StatusConflict:
		return "", ErrStaleToken
	default:
		return "", fmt.Errorf("resource: %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
}
