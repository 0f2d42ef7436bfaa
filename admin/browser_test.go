package admin

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

// The status page as a browser builds it: headless Chromium dumps the DOM
// of the page a live admin server serves (cmd/orderly's
// TestDemoAdminBrowser does the same for the demo's).

// requireBrowser names the variable that turns a missing Chromium from a
// skip into a failure (.ci/run sets it).
const requireBrowser = "ORDERLY_REQUIRE_BROWSER"

// chromium returns the path of a Chromium (or Chrome) binary:
// $ORDERLY_CHROMIUM, else the first of the usual names on $PATH. Without
// one the test is skipped, or fails when ORDERLY_REQUIRE_BROWSER is set.
func chromium(t *testing.T) string {
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
	if os.Getenv(requireBrowser) != "" {
		t.Fatalf("%s, and %s is set", msg, requireBrowser)
	}
	t.Skip(msg)
	return ""
}

// browserDOM loads url in headless Chromium and returns the DOM it built,
// parsed. Each run has a profile of its own.
func browserDOM(t *testing.T, bin, url string) *html.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{"--headless", "--disable-gpu", "--no-sandbox", "--disable-dev-shm-usage",
		"--no-first-run", "--disable-extensions", "--disable-breakpad", "--user-data-dir=" + t.TempDir(), "--dump-dom", url}
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %q: %v\nstderr:\n%s", bin, args, err, stderr.String())
	}
	root, err := html.Parse(strings.NewReader(string(out)))
	if err != nil {
		t.Fatalf("parse the DOM: %v\n%s", err, out)
	}
	return root
}

// domFind returns the first element under n that match accepts, or nil.
func domFind(n *html.Node, match func(*html.Node) bool) *html.Node {
	if n == nil {
		return nil
	}
	if n.Type == html.ElementNode && match(n) {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := domFind(c, match); f != nil {
			return f
		}
	}
	return nil
}

func domAttr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func domByID(id string) func(*html.Node) bool {
	return func(n *html.Node) bool { return domAttr(n, "id") == id }
}

func domByClass(class string) func(*html.Node) bool {
	return func(n *html.Node) bool { return strings.Contains(" "+domAttr(n, "class")+" ", " "+class+" ") }
}

// domText is the text content of the element with id under root, spaces
// collapsed; "<missing>" when there is none.
func domText(root *html.Node, id string) string {
	n := domFind(root, domByID(id))
	if n == nil {
		return "<missing>"
	}
	return textOf(n)
}

func textOf(n *html.Node) string {
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
