package sink

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// HTTPClient reads a sink's HTTP API (Handler): the change log, the status
// and the search. It is the Go client behind `micra subscribe`, `micra
// search`, `micra sink status|export` and the testnet.
type HTTPClient struct {
	Base *url.URL     // http(s)://HOST:PORT
	HTTP *http.Client // nil: http.DefaultClient
}

// NewHTTPClient checks addr is a sink's http:// or https:// address.
func NewHTTPClient(addr string) (*HTTPClient, error) {
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q: want the sink's http:// address (e.g. http://127.0.0.1:8090)", addr)
	}
	return &HTTPClient{Base: u}, nil
}

func (c *HTTPClient) client() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// get GETs path?q and returns the body of a 200 answer (the caller closes
// it); another status is an error carrying the sink's message.
func (c *HTTPClient) get(ctx context.Context, path string, q url.Values) (io.ReadCloser, error) {
	u := c.Base.JoinPath(path)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.client().Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		if bs, ok := ParseBeforeStart(string(msg)); ok && resp.StatusCode == http.StatusGone {
			return nil, fmt.Errorf("GET %s: %w", path, bs)
		}
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(msg)))
	}
	return resp.Body, nil
}

// Records streams the change log after the cursor: fn gets each record's
// sequence number and its JSON line (a StreamRecord). A cursor whose next
// record the sink's retention dropped is a *BeforeStartError. limit 0 means no
// limit; with follow the stream stays open for new records until ctx ends
// or the connection drops. It returns how many records fn took; fn's
// error stops the stream and is returned.
func (c *HTTPClient) Records(ctx context.Context, after uint64, limit int, follow bool, f Filter, fn func(seq uint64, line []byte) error) (int, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if follow {
		q.Set("follow", "true")
	}
	for k, v := range map[string]string{"host": f.Host, "suffix": f.Suffix, "keyword": f.Keyword, "lang": f.Lang} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Changed {
		q.Set("changed", "true")
	}
	body, err := c.get(ctx, "/v1/records", q)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	n, cursor := 0, after
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue // keep-alive
		}
		var head struct {
			Seq   uint64 `json:"seq"`
			Error string `json:"error"`
		}
		if err := json.Unmarshal(line, &head); err != nil {
			return n, fmt.Errorf("unreadable record after %d: %w", cursor, err)
		}
		if head.Error != "" {
			if bs, ok := ParseBeforeStart(head.Error); ok {
				return n, fmt.Errorf("the sink: %w", bs) // (the retention passed the stream)
			}
			return n, fmt.Errorf("the sink: %s", head.Error)
		}
		if head.Seq == 0 {
			return n, fmt.Errorf("a record without a sequence number after %d: %.200s", cursor, line)
		}
		if err := fn(head.Seq, line); err != nil {
			return n, err
		}
		cursor, n = head.Seq, n+1
	}
	if err := sc.Err(); err != nil {
		return n, fmt.Errorf("after record %d: %w", cursor, err)
	}
	return n, nil
}

// Status reads GET /v1/status.
func (c *HTTPClient) Status(ctx context.Context) (Status, error) {
	var st Status
	body, err := c.get(ctx, "/v1/status", nil)
	if err != nil {
		return st, err
	}
	defer body.Close()
	return st, json.NewDecoder(body).Decode(&st)
}

// Search asks GET /v1/search for the pages matching every word of q
// (host "" for any; limit 0 for the sink's default).
func (c *HTTPClient) Search(ctx context.Context, q, host string, limit int) (Results, error) {
	var res Results
	v := url.Values{"q": {q}}
	if host != "" {
		v.Set("host", host)
	}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	body, err := c.get(ctx, "/v1/search", v)
	if err != nil {
		return res, err
	}
	defer body.Close()
	return res, json.NewDecoder(body).Decode(&res)
}
