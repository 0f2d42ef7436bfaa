// Package browsertest runs headless Chromium for tests of the status page
// and reads the DOM it builds: what the page looks like in a real browser,
// its scripts run, not the HTML the server sent.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

// RequireVar names the variable that turns a missing Chromium from a skip
// into a failure (.ci/run sets it).
const RequireVar = "ORDERLY_REQUIRE_BROWSER"

// Chromium returns the path of a Chromium (or Chrome) binary:
// $ORDERLY_CHROMIUM, else the first of the usual names on $PATH. Without
// one the test is skipped, or fails when ORDERLY_REQUIRE_BROWSER is set.
func Chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("ORDERLY_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium on $PATH (chromium, chromium-browser, google-chrome; or set ORDERLY_CHROMIUM): install the Debian package chromium to run the browser test"
	if os.Getenv(RequireVar) != "" {
		t.Fatalf("%s, and %s is set", msg, RequireVar)
	}
	t.Skip(msg)
	return ""
}

// Run runs Chromium bin headless on url with args and returns its stdout.
// Each run has a profile of its own, so that runs in parallel (other
// tests, other engineers) do not share one.
func Run(t testing.TB, bin, url string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args = append([]string{"--headless", "--disable-gpu", "--no-sandbox", "--disable-dev-shm-usage",
		"--no-first-run", "--disable-extensions", "--disable-breakpad", "--user-data-dir=" + t.TempDir()}, args...)
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %q: %v\nstderr:\n%s", bin, args, err, stderr.String())
	}
	return out
}

// DOM loads url in headless Chromium and returns the DOM it built, parsed.
func DOM(t testing.TB, bin, url string) *html.Node {
	t.Helper()
	return Parse(t, Run(t, bin, url, "--dump-dom"))
}

// Parse parses a DOM Chromium dumped.
func Parse(t testing.TB, dom []byte) *html.Node {
	t.Helper()
	root, err := html.Parse(strings.NewReader(string(dom)))
	if err != nil {
		t.Fatalf("parse the DOM: %v\n%s", err, dom)
	}
	return root
}

// Find returns the first element under n (n included) that match
// accepts, or nil.
func Find(n *html.Node, match func(*html.Node) bool) *html.Node {
	if n == nil {
		return nil
	}
	if n.Type == html.ElementNode && match(n) {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := Find(c, match); f != nil {
			return f
		}
	}
	return nil
}

// FindAll returns every element under n (n included) that match accepts.
func FindAll(n *html.Node, match func(*html.Node) bool) []*html.Node {
	if n == nil {
		return nil
	}
	var out []*html.Node
	if n.Type == html.ElementNode && match(n) {
		out = append(out, n)
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		out = append(out, FindAll(c, match)...)
	}
	return out
}

// Attr is n's attribute key, "" when it has none or n is nil.
func Attr(n *html.Node, key string) string {
	if n == nil {
		return ""
	}
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// ByID matches the element with id.
func ByID(id string) func(*html.Node) bool {
	return func(n *html.Node) bool { return Attr(n, "id") == id }
}

// ByClass matches elements that have class among their classes.
func ByClass(class string) func(*html.Node) bool {
	return func(n *html.Node) bool { return strings.Contains(" "+Attr(n, "class")+" ", " "+class+" ") }
}

// Text is n's text content, spaces collapsed; "<missing>" for nil.
func Text(n *html.Node) string {
	if n == nil {
		return "<missing>"
	}
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}
