package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/orderly-go/orderly/admin"
	"github.com/orderly-go/orderly/internal/browsertest"
)

// demoProc is a running `orderly demo --admin` process.
type demoProc struct {
	cmd    *exec.Cmd
	url    string // the admin server's, from the demo's output
	mu     sync.Mutex
	stdout strings.Builder
	stderr strings.Builder
	done   chan struct{} // stdout closed
}

func (d *demoProc) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stdout.String()
}

// startDemo starts the orderly binary with args and waits for the line
// "admin: URL ..." on its stdout.
func startDemo(t *testing.T, args ...string) *demoProc {
	t.Helper()
	d := &demoProc{cmd: exec.Command(orderlyBin(t), args...), done: make(chan struct{})}
	d.cmd.Env = procEnv()
	d.cmd.Stderr = &d.stderr
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			<-d.done
			d.cmd.Wait()
		}
	})
	urls := make(chan string, 1)
	go func() {
		defer close(d.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			d.mu.Lock()
			d.stdout.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
			if rest, ok := strings.CutPrefix(sc.Text(), "admin: "); ok {
				urls <- strings.Fields(rest)[0]
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	select {
	case d.url = <-urls:
	case <-d.done:
		d.cmd.Wait()
		t.Fatalf("the demo ended without printing its admin URL\nstdout:\n%s\nstderr:\n%s", d.output(), d.stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("no admin URL after a minute\nstdout:\n%s", d.output())
	}
	return d
}

// get GETs the admin server's path.
func (d *demoProc) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(d.url + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, b
}

// interrupt sends SIGINT and waits for the process to end.
func (d *demoProc) interrupt(t *testing.T) int {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(time.Minute):
		t.Fatalf("the demo did not end within a minute of SIGINT\nstdout:\n%s", d.output())
	}
	d.cmd.Wait()
	return d.cmd.ProcessState.ExitCode()
}

// TestDemoAdminBrowser runs `orderly demo --admin` as a process with one
// partition's first call hanging (--stuck-partition), waits until /stats
// shows that partition STALLed with its stuck head named and a worker
// stuck, then loads the status page in headless Chromium and checks what
// the browser built: the partitions table with every partition, the stuck
// one's row marked STALL with "stuck head" in its reason, a stuck worker,
// the group's banner STALL. It takes a 1280x900 screenshot (into
// $ORDERLY_SCREENSHOT when set: docs/status-page.png is made that way),
// checks /healthz fails meanwhile, and that after SIGINT the demo exits 3
// with its progress line having shown "STALL orderly-demo/3".
func TestDemoAdminBrowser(t *testing.T) {
	bin := browsertest.Chromium(t)
	const parts, stuck = 8, 3
	d := startDemo(t, "demo", "--admin", "127.0.0.1:0", "--progress", "on", "--timeout", "2m",
		"--partitions", fmt.Sprint(parts), "--messages", "40000", "--rate", "2000", "--keys", "800", "--size", "1",
		"--stuck-partition", fmt.Sprint(stuck), "--msg-timeout", "1s", "--status-window", "3", "--stuck-head", "2s")

	// Wait for the state the page must show, as /stats sees it.
	var doc admin.StatsDoc
	deadline := time.Now().Add(45 * time.Second)
	for {
		code, body := d.get(t, "stats")
		if code != http.StatusOK {
			t.Fatalf("/stats: %d %s", code, body)
		}
		doc = admin.StatsDoc{}
		if err := json.Unmarshal(body, &doc); err != nil {
			t.Fatalf("decode /stats: %v\n%s", err, body)
		}
		if p := partitionDoc(doc, stuck); p != nil && p.Status.Name == "STALL" &&
			strings.Contains(p.Status.Reason, "stuck head") && doc.Now.StuckWorkers == 1 && len(doc.Partitions) == parts {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition %d not shown STALL with a stuck head and a stuck worker after 45s: %s", stuck, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, body := d.get(t, "healthz"); code != http.StatusServiceUnavailable || !strings.Contains(string(body), "stuck") {
		t.Errorf("/healthz with a stuck worker: got %d %q, want 503 naming the stuck worker", code, body)
	}

	dom := browsertest.Run(t, bin, d.url, "--dump-dom")
	checkStatusPage(t, dom, parts, stuck)

	shot := t.TempDir() + "/status-page.png"
	browsertest.Run(t, bin, d.url, "--hide-scrollbars", "--window-size=1280,900", "--screenshot="+shot)
	checkScreenshot(t, shot)

	if code := d.interrupt(t); code != exitInterrupted {
		t.Errorf("exit %d after SIGINT, want %d\nstderr:\n%s", code, exitInterrupted, d.stderr.String())
	}
	want := fmt.Sprintf("STALL orderly-demo/%d", stuck)
	if out := d.output(); !strings.Contains(out, want) {
		t.Errorf("no progress line shows %q:\n%s", want, out)
	}
}

func partitionDoc(doc admin.StatsDoc, p int32) *admin.PartitionDoc {
	for i := range doc.Partitions {
		if doc.Partitions[i].Partition == p {
			return &doc.Partitions[i]
		}
	}
	return nil
}

// checkStatusPage checks the DOM Chromium built from the status page.
func checkStatusPage(t *testing.T, dom []byte, parts int, stuck int32) {
	t.Helper()
	root := browsertest.Parse(t, dom)
	defer func() {
		if t.Failed() {
			t.Logf("DOM:\n%s", dom)
		}
	}()
	if banner := browsertest.Find(root, browsertest.ByID("group-status")); banner == nil || !strings.Contains(browsertest.Text(banner), "STALL") {
		t.Errorf("the group's banner: got %q, want it to say STALL", browsertest.Text(banner))
	}
	table := browsertest.Find(root, browsertest.ByID("partitions-table"))
	if table == nil {
		t.Fatal("no partitions table (#partitions-table)")
	}
	rows := browsertest.FindAll(table, func(n *html.Node) bool { return n.Data == "tr" && browsertest.Attr(n, "data-partition") != "" })
	if len(rows) != parts {
		t.Errorf("partitions table: %d rows, want %d", len(rows), parts)
	}
	var row *html.Node
	for _, r := range rows {
		if browsertest.Attr(r, "data-partition") == fmt.Sprint(stuck) {
			row = r
		}
	}
	if row == nil {
		t.Fatalf("no row for partition %d", stuck)
	}
	if got := browsertest.Attr(row, "data-status"); got != "STALL" {
		t.Errorf("partition %d: data-status %q, want STALL", stuck, got)
	}
	badge := browsertest.Find(row, browsertest.ByClass("badge"))
	if badge == nil || browsertest.Text(badge) != "STALL" || !strings.Contains(browsertest.Attr(badge, "class"), "st-5") {
		t.Errorf("partition %d: status badge %q (class %q), want STALL with class st-5", stuck, browsertest.Text(badge), browsertest.Attr(badge, "class"))
	}
	if reason := browsertest.Find(row, browsertest.ByClass("reason")); reason == nil || !strings.Contains(browsertest.Text(reason), "stuck head") {
		t.Errorf("partition %d: reason %q, want it to name the stuck head", stuck, browsertest.Text(reason))
	}
	workers := browsertest.Find(root, browsertest.ByID("workers"))
	if workers == nil {
		t.Fatal("no workers section (#workers)")
	}
	if n := len(browsertest.FindAll(workers, browsertest.ByClass("stuck"))); n < 1 {
		t.Errorf("workers: no worker shown stuck")
	}
}

// checkScreenshot checks that path is a 1280x900 PNG and copies it to
// $ORDERLY_SCREENSHOT when set.
func checkScreenshot(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	img, err := png.DecodeConfig(strings.NewReader(string(b)))
	if err != nil {
		t.Fatalf("screenshot: not a PNG: %v", err)
	}
	if img.Width != 1280 || img.Height != 900 {
		t.Errorf("screenshot: %dx%d, want 1280x900", img.Width, img.Height)
	}
	if dst := os.Getenv("ORDERLY_SCREENSHOT"); dst != "" {
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot (%d bytes) written to %s", len(b), dst)
	}
}

// TestDemoAdminFlags: bad --admin and --stuck-partition values are usage
// errors naming the flag; a complete demo with --admin prints the URL and
// stops its server (TestMain's leak check fails otherwise).
func TestDemoAdminFlags(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	small := []string{"demo", "--messages", "500", "--keys", "50", "--partitions", "2", "--io", "0", "--io-item", "0", "--progress", "off"}
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--admin", "8080"}, `invalid value "8080" for --admin: must be host:port`},
		{[]string{"--admin", ":8080"}, "must name a host"},
		{[]string{"--stuck-partition", "2"}, `--stuck-partition 2: "orderly-demo" has partitions 0 to 1`},
	}
	for _, tt := range tests {
		out, err := runCmd(ctx, append(small, tt.args...)...)
		var usage *usageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%q: got %v, want a usage error containing %q\n%s", tt.args, err, tt.wantErr, out)
		}
	}
	out, err := runCmd(ctx, append(small, "--admin", "127.0.0.1:0", "--pprof")...)
	if err != nil {
		t.Fatalf("demo --admin: %v\n%s", err, out)
	}
	if !strings.Contains(out, "admin: http://127.0.0.1:") || !strings.Contains(out, "/debug/pprof/") {
		t.Errorf("demo --admin --pprof: no admin URL with pprof in the output:\n%s", out)
	}
}
