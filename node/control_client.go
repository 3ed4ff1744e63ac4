package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// ControlClient talks to a running node's control API (the CLI's `micra
// id`, `status`, `peers`, `owners`, `seed`).
type ControlClient struct {
	base string
	hc   *http.Client
}

// NewControlClient is a client of the control API at base: a URL
// ("http://127.0.0.1:5001") or host:port.
func NewControlClient(base string) (*ControlClient, error) {
	base = strings.TrimSpace(base)
	if base == "" {
		return nil, errors.New("node: empty control API address")
	}
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("node: control API address %q: want http://HOST:PORT", base)
	}
	// one request at a time, no proxy (the API is local), no idle
	// connections left behind
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	return &ControlClient{base: strings.TrimRight(u.String(), "/"), hc: &http.Client{Transport: tr}}, nil
}

// ReadAPIFile returns the control API URL a running node wrote to
// dataDir/api. The error wraps fs.ErrNotExist when there is none (no node
// runs there, or it never started its API).
func ReadAPIFile(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, APIFile))
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("node: %s is empty", filepath.Join(dataDir, APIFile))
	}
	return s, nil
}

// URL is the API's base URL.
func (c *ControlClient) URL() string { return c.base }

// ID is GET /v1/id.
func (c *ControlClient) ID(ctx context.Context) (IDInfo, error) {
	var v IDInfo
	return v, c.do(ctx, http.MethodGet, "/v1/id", nil, "", &v)
}

// Status is GET /v1/status.
func (c *ControlClient) Status(ctx context.Context) (StatusInfo, error) {
	var v StatusInfo
	return v, c.do(ctx, http.MethodGet, "/v1/status", nil, "", &v)
}

// Peers is GET /v1/peers.
func (c *ControlClient) Peers(ctx context.Context) ([]PeerInfo, error) {
	var v PeersInfo
	err := c.do(ctx, http.MethodGet, "/v1/peers", nil, "", &v)
	return v.Peers, err
}

// Owners is GET /v1/owners: addrs (none: every cached record), lookup
// (a real delegation instead of the cache), mine (records listed: only
// this node's).
func (c *ControlClient) Owners(ctx context.Context, addrs []string, lookup, mine bool) ([]OwnerInfo, error) {
	q := url.Values{}
	for _, a := range addrs {
		q.Add("addr", a)
	}
	if lookup {
		q.Set("lookup", "1")
	}
	if mine {
		q.Set("mine", "1")
	}
	path := "/v1/owners"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var v OwnersInfo
	err := c.do(ctx, http.MethodGet, path, nil, "", &v)
	return v.Owners, err
}

// Seed is POST /v1/seeds. The answer lists every seed's fate even when
// the error says the hand-off spool failed.
func (c *ControlClient) Seed(ctx context.Context, urls []string) (SeedsInfo, error) {
	body, err := json.Marshal(urls)
	if err != nil {
		return SeedsInfo{}, err
	}
	var v SeedsInfo
	return v, c.do(ctx, http.MethodPost, "/v1/seeds", body, "application/json", &v)
}

// Pause is POST /v1/pause: the crawl starts no new fetch until resumed.
func (c *ControlClient) Pause(ctx context.Context) (PauseInfo, error) {
	var v PauseInfo
	return v, c.do(ctx, http.MethodPost, "/v1/pause", nil, "", &v)
}

// Resume is POST /v1/resume.
func (c *ControlClient) Resume(ctx context.Context) (PauseInfo, error) {
	var v PauseInfo
	return v, c.do(ctx, http.MethodPost, "/v1/resume", nil, "", &v)
}

// Partition is POST /v1/testnet/partition: the node refuses connections
// with these peers from now on and closes those open (none: it heals). A
// loopback testnet's nodes only.
func (c *ControlClient) Partition(ctx context.Context, deny []string) (PartitionInfo, error) {
	body, err := json.Marshal(PartitionInfo{Deny: append([]string{}, deny...)})
	if err != nil {
		return PartitionInfo{}, err
	}
	var v PartitionInfo
	return v, c.do(ctx, http.MethodPost, "/v1/testnet/partition", body, "application/json", &v)
}

// APIError is an error answer of the control API.
type APIError struct {
	Code    int
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("control API: %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// UnreachableError: nothing answers at the control API's URL (no node
// runs there, or it stopped).
type UnreachableError struct {
	URL string
	Err error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("no node answers at %s: %v", e.URL, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

func (c *ControlClient) do(ctx context.Context, method, path string, body []byte, ctype string, out any) error {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return &UnreachableError{URL: c.base, Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("control API %s: %w", c.base, err)
	}
	var apiErr error
	if resp.StatusCode != http.StatusOK {
		var e apiError
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		apiErr = &APIError{Code: resp.StatusCode, Message: msg}
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			return apiErr
		}
	}
	if err := json.Unmarshal(b, out); err != nil && apiErr == nil {
		return fmt.Errorf("control API %s%s: %w", c.base, path, err)
	}
	return apiErr
}
