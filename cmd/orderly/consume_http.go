package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/lograte"
)

// httpSink POSTs batches to --http.
type httpSink struct {
	url     string // the request URL
	https   bool
	shown   string // url as messages show it: a password in it redacted
	host    string // host:port, for the start-up check
	raw     bool   // --size 1: the raw value as the body
	headers http.Header
	client  *http.Client
	tr      *http.Transport

	sinkCore
	pauses lograte.Limit // the endpoint asking for pauses, at info
}

// maxResponse is the most of a response body read: outcomes of a large
// batch fit, and a huge body cannot exhaust memory.
const maxResponse = 4 << 20

func newHTTPSink(o *consumeOpts, gt *gate, ctr *sinkCounters, log *zap.Logger) (*httpSink, error) {
	u, _ := url.Parse(o.httpURL) // checked
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	tc, err := tlsConfig(o.httpCA, flagArg(o.fs, "http-ca", o.httpCA))
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tc,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        o.num,
		MaxIdleConnsPerHost: o.num,
		MaxConnsPerHost:     o.num,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	hdr := http.Header{}
	for _, h := range o.headers {
		name, val, _ := parseHeader(h) // checked
		hdr.Add(name, val)
	}
	return &httpSink{
		url: o.httpURL, https: u.Scheme == "https", shown: u.Redacted(), host: host, raw: o.size == 1, headers: hdr, tr: tr,
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a redirect is an endpoint error: the URL is wrong
		}},
		sinkCore: newSinkCore(o, gt, ctr, log), pauses: lograte.Limit{Every: warnEvery},
	}, nil
}

func (s *httpSink) describe() string {
	if s.raw {
		return "POST " + s.shown + " (one record per request, raw body)"
	}
	return "POST " + s.shown + " (JSON batches)"
}

func (s *httpSink) close() { s.tr.CloseIdleConnections() }

// probe checks at start that the endpoint accepts TCP connections and,
// for https, completes a TLS handshake with a certificate it trusts, so
// that a wrong --http or a missing --http-ca fails at once instead of
// retrying forever. Its errors begin with flag, how the user gave --http.
func (s *httpSink) probe(ctx context.Context, timeout time.Duration, flag string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", s.host)
	if err != nil {
		return fmt.Errorf("%s: endpoint unreachable (--no-check skips this check): %w", flag, err)
	}
	defer c.Close()
	if !s.https {
		return nil
	}
	tc := s.tr.TLSClientConfig.Clone()
	if tc.ServerName == "" {
		tc.ServerName, _, _ = net.SplitHostPort(s.host)
	}
	if err := tls.Client(c, tc).HandshakeContext(ctx); err != nil {
		return fmt.Errorf("%s: TLS handshake failed (--http-ca names a CA to trust; --no-check skips this check): %w", flag, err)
	}
	return nil
}

// tlsFault reports whether err, from sending a request, says the endpoint
// is not trusted or does not speak TLS, and names it for the counters.
func tlsFault(err error) (string, bool) {
	var (
		verify *tls.CertificateVerificationError
		header tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &verify):
		return "TLS: certificate not trusted", true
	case errors.As(err, &header), errors.Is(err, http.ErrSchemeMismatch): // Go's client reports an HTTP answer to a TLS hello so
		return "TLS: the endpoint does not speak TLS", true
	}
	return "", false
}

// send is the group's Do: one POST for the batch.
func (s *httpSink) send(ctx context.Context, batch []*group.Message) error {
	if d := s.gate.remaining(); d > 0 {
		return deferAll(len(batch), d) // the endpoint asked for a pause
	}
	req, err := s.request(ctx, batch)
	if err != nil {
		return err
	}
	s.ctr.calls.Add(1)
	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			// A timeout (counted by the group as a failed attempt) or a
			// shutdown or revoke (uncharged): the group tells them apart.
			return fmt.Errorf("POST %s for %s: %w", s.shown, where(batch), callCause(ctx, s.timeout))
		}
		if what, ok := tlsFault(err); ok {
			// The endpoint is not trusted (or does not speak TLS): an
			// endpoint error, as a wrong URL is.
			return s.endpointFault(batch, what, "endpoint error: check --http and --http-ca; retrying, never dead-lettered",
				zap.String("url", s.shown), zap.Error(err))
		}
		s.ctr.failed.Add(1)
		s.warnf(batch, "request failed; retrying with backoff", err)
		return failAll(batch, fmt.Errorf("POST %s: %w", s.shown, err))
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponse)) // so the connection is reused
	resp.Body.Close()
	if len(body) > maxResponse && rerr == nil {
		body = body[:maxResponse]
		if code := resp.StatusCode; code >= 200 && code < 300 && jsonType(resp.Header.Get("Content-Type")) {
			// Its outcomes would be cut short: taking the call as done
			// would drop what the rest named.
			rerr = fmt.Errorf("a JSON answer over %d MiB: its outcomes cannot all be read", maxResponse>>20)
		}
	}
	code := resp.StatusCode
	if code >= 200 && code < 300 && rerr == nil && len(body) == 0 {
		s.endpoint.ok()
		s.ctr.ok.Add(1)
		return nil // the common case: done, nothing to read
	}
	status := fmt.Sprintf("HTTP %d %s", code, http.StatusText(code))
	switch {
	case code >= 200 && code < 300:
		s.endpoint.ok()
		if rerr != nil {
			s.ctr.failed.Add(1)
			return failAll(batch, fmt.Errorf("POST %s: %s, reading the body: %w", s.shown, status, rerr))
		}
		err := s.outcomes(batch, resp.Header, body)
		if errors.Is(err, errBadOutcome) {
			s.ctr.failed.Add(1)
			s.warnf(batch, "bad outcomes in a 2xx response; retrying the batch", err)
			return failAll(batch, err)
		}
		s.ctr.ok.Add(1)
		return err
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		s.ctr.throttled.Add(1)
		d := s.gate.close(retryAfter(resp.Header.Get("Retry-After"), time.Now()))
		s.pauses.Info(s.log, "endpoint asked for a pause: pausing every request", append(batchFields(batch),
			zap.String("status", status), zap.Duration("pause", d))...)
		return deferAll(len(batch), d)
	case code == http.StatusUnauthorized || code == http.StatusForbidden || code == http.StatusNotFound ||
		code == http.StatusProxyAuthRequired || code >= 300 && code < 400:
		return s.endpointFault(batch, status, "endpoint error: check --http and its credentials (--header); retrying, never dead-lettered",
			zap.String("url", s.shown), zap.String("status", status), zap.String("body", snippet(body)))
	case code >= 400 && code < 500:
		return s.rejectedCall(batch, fmt.Errorf("POST %s: %s: %s", s.shown, status, snippet(body)))
	}
	s.ctr.failed.Add(1)
	s.warnf(batch, "endpoint failed; retrying with backoff", errors.New(status))
	return failAll(batch, fmt.Errorf("POST %s: %s: %s", s.shown, status, snippet(body)))
}

func (s *httpSink) warnf(batch []*group.Message, msg string, err error) {
	s.failLog.Warn(s.log, msg, append(batchFields(batch), zap.String("url", s.shown), zap.Error(err))...)
}

// request builds the POST of a batch: a JSON array, or for --size 1 the
// raw value with the record's coordinates in Kafka-* headers.
func (s *httpSink) request(ctx context.Context, batch []*group.Message) (*http.Request, error) {
	var body []byte
	ctype := "application/json"
	if s.raw {
		body = batch[0].Value // never reused by the group (see group.Message)
		ctype = "application/octet-stream"
	} else {
		var buf bytes.Buffer
		if err := appendBatchJSON(&buf, batch); err != nil {
			return nil, fmt.Errorf("encode %s: %w", where(batch), err)
		}
		body = buf.Bytes()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", s.shown, err)
	}
	for k, v := range s.headers {
		if k == "Host" {
			req.Host = v[0] // Go's client sends req.Host, not a Host header
			continue
		}
		req.Header[k] = v
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", ctype)
	}
	if s.raw {
		if err := setKafkaHeaders(req.Header, batch[0]); err != nil {
			return nil, fmt.Errorf("encode %s: %w", where(batch), err)
		}
	}
	return req, nil
}

// setKafkaHeaders puts a record's coordinates in the request headers, as
// uForwarder does, and what the raw body cannot say: whether the value is
// null (a tombstone, where an empty body could be an empty value), and the
// record's headers, as a JSON array in the batches' form, escaped to ASCII.
func setKafkaHeaders(h http.Header, m *group.Message) error {
	h.Set("Kafka-Topic", m.Topic)
	h.Set("Kafka-Partition", strconv.Itoa(int(m.Partition)))
	h.Set("Kafka-Offset", strconv.FormatInt(m.Offset, 10))
	h.Set("Kafka-Attempt", strconv.Itoa(m.Attempt))
	if !m.Timestamp.IsZero() {
		h.Set("Kafka-Timestamp", m.Timestamp.UTC().Format(timestampFormat))
	}
	if m.Key != nil {
		if headerSafe(m.Key) {
			h.Set("Kafka-Key", string(m.Key))
		} else {
			h.Set("Kafka-Key", base64.StdEncoding.EncodeToString(m.Key))
			h.Set("Kafka-Key-Encoding", "base64")
		}
	}
	if m.Value == nil {
		h.Set("Kafka-Tombstone", "true")
	}
	if len(m.Headers) > 0 {
		hs, err := asciiJSON(headersJSON(m.Headers))
		if err != nil {
			return fmt.Errorf("record headers: %w", err)
		}
		if len(hs) > maxHeadersField {
			h.Set("Kafka-Headers-Omitted", strconv.Itoa(len(hs)))
		} else {
			h.Set("Kafka-Headers", hs)
		}
	}
	return nil
}

// maxHeadersField is the longest Kafka-Headers value sent. Servers limit
// a request header's length (nginx and Apache to about 8 KiB per line by
// default) and refuse longer ones with 431, which would dead-letter the
// record: longer headers are left out, and Kafka-Headers-Omitted says how
// long they were (JSON batches carry them whatever their size).
const maxHeadersField = 4096

// headerSafe reports whether b can travel as a header value unchanged:
// printable ASCII without space at either end (HTTP trims it).
func headerSafe(b []byte) bool {
	if len(b) > 0 && (b[0] == ' ' || b[len(b)-1] == ' ') {
		return false
	}
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// outcomes reads the per-item outcomes of a 2xx JSON body, if it names
// any: {"items": [{"index": 2, "outcome": "retry", "error": "..."}]}. Any
// other body means every item is done. An items member that does not read
// as that array (a field of the wrong type, say) fails the call, as a bad
// outcome does: the endpoint meant to name outcomes, and passing its
// records as done would drop the retries and rejections it named.
func (s *httpSink) outcomes(batch []*group.Message, h http.Header, body []byte) error {
	if len(body) == 0 || !jsonType(h.Get("Content-Type")) {
		return nil
	}
	var top struct {
		Items json.RawMessage `json:"items"`
	}
	if json.Unmarshal(body, &top) != nil || top.Items == nil {
		return nil
	}
	var items []outcomeJSON
	if err := json.Unmarshal(top.Items, &items); err != nil {
		return fmt.Errorf("%w: POST %s: the answer's items do not read as outcomes: %v", errBadOutcome, s.shown, err)
	}
	if items == nil { // "items": null
		return nil
	}
	return applyOutcomes(batch, items, s.defDelay, "POST "+s.shown, s.ctr)
}

// jsonType reports whether a Content-Type contains "json", in any case
// (media types are case-insensitive): application/json, a +json type.
func jsonType(ctype string) bool { return strings.Contains(strings.ToLower(ctype), "json") }

// defaultRetryAfter is the pause for a 429 or 503 without a usable
// Retry-After; maxRetryAfter caps what an endpoint may ask for.
const (
	defaultRetryAfter = time.Second
	maxRetryAfter     = time.Hour
)

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date.
// One that asks for no pause (0, a date past) counts as none: the
// endpoint said it is overloaded, and taking it at its word sent it
// thousands of requests a second.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return defaultRetryAfter
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return defaultRetryAfter
		}
		return min(time.Duration(n)*time.Second, maxRetryAfter)
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, maxRetryAfter)
		}
	}
	return defaultRetryAfter
}

// snippet is the start of a response body for an error message.
func snippet(b []byte) string {
	const n = 200
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = s[:n] + "..."
	}
	return strings.ReplaceAll(s, "\n", " ")
}
