package main

import (
	"bufio"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var adminURLRE = regexp.MustCompile(`(?m)^admin: (http://127\.0\.0\.1:\d+/) `)

// TestConsumeAdmin runs consume with --admin 127.0.0.1:0: it prints the
// admin server's URL; once the commit reaches the high watermarks /readyz
// answers 200 and /metrics counts as handled (orderly_records_total) the
// records the endpoint answered 200, per partition summed; after SIGTERM
// the server is gone with the process.
func TestConsumeAdmin(t *testing.T) {
	t.Parallel()
	const n = 120
	b := newTopic(t, "adm", 3)
	produceKeyed(t, b, "adm", n, 12)
	ep := newEndpoint(t, 0, func([]hit) (int, http.Header, string) { return http.StatusOK, nil, "" })
	p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "adm", "--group", "adm", "--http", ep.url(),
		"--admin", "127.0.0.1:0", "--progress", "off", "--log-level", "error")
	url := p.adminURL()
	p.waitCommitted(b, "adm", "adm")
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatalf("GET %s%s: %v", url, path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("readyz"); code != http.StatusOK {
		t.Errorf("/readyz: got %d %q, want 200 (joined)", code, body)
	}
	code, metrics := get("metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: got %d", code)
	}
	handled := 0.0
	sc := bufio.NewScanner(strings.NewReader(metrics))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "orderly_records_total{") && strings.Contains(line, `outcome="handled"`) && strings.Contains(line, `topic="adm"`) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			handled += v
		}
	}
	if ok := ep.okCount(); handled != float64(ok) || ok != n {
		t.Errorf("orderly_records_total{outcome=\"handled\"} sums to %v, endpoint answered %d of %d; want all three equal", handled, ok, n)
	}
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
	}
	if resp, err := http.Get(url + "readyz"); err == nil {
		resp.Body.Close()
		t.Errorf("admin server still answers after consume exited (%d)", resp.StatusCode)
	}
}

// adminURL waits for the admin server's URL on p's stdout and returns it.
func (p *consumeProc) adminURL() string {
	p.t.Helper()
	var url string
	p.waitFor(30*time.Second, "the admin URL on stdout", func() bool {
		m := adminURLRE.FindStringSubmatch(p.stdout.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})
	return url
}
