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
//	GET  /read-shared?key=K[&token=T]   the same, as ReadShared
//	POST /write?key=K&value=V[&token=T] 204, or 409 for a stale token
//	POST /write-all?key=K1&value=V1[&token=T1]&key=K2&value=V2[&token=T2]...
//	                                    204, or 409 for a stale token, as WriteAll
//
// A request without token is unfenced. A write-all gives a token for every key or for none.
func Handler(s *Store) http.Handler {
	mux := http.NewServeMux()
	read := func(read func(string, Token) (int64, error)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			key, tok, err := parse(r)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			v, err := read(key, tok)
			if reply(w, err) {
				fmt.Fprint(w, v)
			}
		}
	}
	mux.HandleFunc("GET /read", read(s.Read))
	mux.HandleFunc("GET /read-shared", read(s.ReadShared))
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
	mux.HandleFunc("POST /write-all", func(w http.ResponseWriter, r *http.Request) {
		ws, err := parseAll(r.URL.Query())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := s.WriteAll(ws); errors.Is(err, ErrKeyTwice) {
			http.Error(w, err.Error(), http.StatusBadRequest)
		} else if reply(w, err) {
			w.WriteHeader(http.StatusNoContent)
		}
	})
	return mux
}

// parseAll reads the writes of a write-all request.
func parseAll(q url.Values) ([]Write, error) {
	keys, values, toks := q["key"], q["value"], q["token"]
	if len(keys) == 0 || len(values) != len(keys) || (len(toks) != 0 && len(toks) != len(keys)) {
		return nil, fmt.Errorf("%d keys, %d values and %d tokens", len(keys), len(values), len(toks))
	}
	ws := make([]Write, len(keys))
	for i, k := range keys {
		if k == "" {
			return nil, errors.New("no key")
		}
		v, err := strconv.ParseInt(values[i], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad value: %w", err)
		}
		ws[i] = Write{Key: k, Value: v}
		if len(toks) > 0 {
			t, err := strconv.ParseUint(toks[i], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("bad token: %w", err)
			}
			ws[i].Token = Token{Value: t, Fenced: true}
		}
	}
	return ws, nil
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
	return c.read(ctx, "read", key, tok)
}

// ReadShared returns key's value as Store.ReadShared; ErrStaleToken when the resource refused
// tok.
func (c *Client) ReadShared(ctx context.Context, key string, tok Token) (int64, error) {
	return c.read(ctx, "read-shared", key, tok)
}

func (c *Client) read(ctx context.Context, path, key string, tok Token) (int64, error) {
	q := url.Values{}
	add(q, key, tok)
	body, err := c.do(ctx, http.MethodGet, path, q)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(body), 10, 64)
}

// Write sets key's value; ErrStaleToken when the resource refused tok. Any other error leaves
// unknown whether the write was applied.
func (c *Client) Write(ctx context.Context, key string, value int64, tok Token) error {
	q := url.Values{"value": {strconv.FormatInt(value, 10)}}
	add(q, key, tok)
	_, err := c.do(ctx, http.MethodPost, "write", q)
	return err
}

// WriteAll applies ws atomically, as Store.WriteAll; ErrStaleToken when the resource refused a
// token. Every write of ws is fenced or none is. Any other error leaves unknown whether ws was
// applied.
func (c *Client) WriteAll(ctx context.Context, ws []Write) error {
	q := url.Values{}
	for _, w := range ws {
		add(q, w.Key, w.Token)
		q.Add("value", strconv.FormatInt(w.Value, 10))
	}
	_, err := c.do(ctx, http.MethodPost, "write-all", q)
	return err
}

// add adds key and, when fenced, tok to q.
func add(q url.Values, key string, tok Token) {
	q.Add("key", key)
	if tok.Fenced {
		q.Add("token", strconv.FormatUint(tok.Value, 10))
	}
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values) (string, error) {
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
