package admin

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// statusPage is the status page's template: server-rendered, refreshed by
// a meta refresh, no JavaScript. html/template escapes every value in its
// context (topic names and reasons are user input).
//
//go:embed status.html
var statusPage string

var pageTemplate = template.Must(template.New("status").Funcs(template.FuncMap{"num": formatNum, "quantile": quantileText}).Parse(statusPage))

// quantileText is a quantile of HistogramDoc for people: the bucket's
// upper bound, or ">" and the last bound when the quantile is above it.
func quantileText(bound string, above bool) string {
	if above {
		return ">" + bound
	}
	return bound
}

// pageData is what the template shows: the /stats document and what the
// page derives from it.
type pageData struct {
	*StatsDoc
	At                         string // the snapshot's time, for people
	Refresh                    int    // seconds between reloads; 0: none
	Pprof                      bool   // link /debug/pprof/
	HasHealth, IsReady, IsLive bool
	Busy                       int            // workers in Do
	StuckWorkers               []WorkerDoc    // workers stuck now
	Problems                   []PartitionDoc // partitions whose status is not OK
	// Headline is the banner at the top: the group's status, or, when
	// the group is not ready and no partition it holds is worse than OK,
	// NOT READY (an OK over no partitions, or over partitions draining,
	// would say nothing is wrong).
	Headline headline
	// NoPartitions says why no partition is claimed (the partitions
	// section shows it when there are none).
	NoPartitions string
	// NotReady says why the group is not ready (the health line).
	NotReady string
}

// headline is the status page's banner.
type headline struct {
	Class  string // st-N for a status code, or notready
	Name   string // OK, WARN, STOP, STALL, REWIND, NOT READY
	Reason string
}

func newPageData(d *StatsDoc, opts *Options) *pageData {
	p := &pageData{StatsDoc: d, At: d.Time.Format("2006-01-02 15:04:05 MST"), Pprof: opts.Pprof}
	if opts.Refresh > 0 {
		p.Refresh = max(1, int(opts.Refresh.Round(time.Second)/time.Second))
	}
	if d.Ready != nil && d.Live != nil {
		p.HasHealth, p.IsReady, p.IsLive = true, *d.Ready, *d.Live
	}
	for _, w := range d.Workers {
		if w.Busy {
			p.Busy++
		}
		if w.Stuck {
			p.StuckWorkers = append(p.StuckWorkers, w)
		}
	}
	for _, pd := range d.Partitions {
		if pd.Status.Code != 1 {
			p.Problems = append(p.Problems, pd)
		}
	}
	p.Headline = headline{Class: "st-" + strconv.Itoa(d.Status.Code), Name: d.Status.Name, Reason: d.Status.Reason}
	if p.Headline.Reason == "" {
		p.Headline.Reason = "every claimed partition is OK"
	}
	p.NoPartitions = "No partition claimed."
	if !p.HasHealth {
		return p
	}
	if p.IsReady {
		p.NoPartitions = "No partition claimed: the group joined and assigned this member none (more members than partitions)."
		return p
	}
	why := notReadyReason(d)
	p.NotReady = why
	p.NoPartitions = "No partition claimed: not ready: " + why + "."
	if d.Status.Code != 1 {
		return p // a status worse than OK stays the headline; the health line says why not ready
	}
	p.Headline = headline{Class: "notready", Name: "NOT READY"}
	switch n := len(d.Partitions); n {
	case 0:
		p.Headline.Reason = why + "; no partition claimed"
	case 1:
		p.Headline.Reason = why + "; the partition it still holds is OK"
	default:
		p.Headline.Reason = fmt.Sprintf("%s; the %d partitions it still holds are OK", why, n)
	}
	return p
}

// notReadyReason is why the group is not ready: its own reason
// (ReadyReason, from a Health with Readiness), or else what Live's
// reason, the partitions it holds and Claims tell (Claims counts the
// partition claims it started, which it does only once joined; a member
// that never held a partition cannot tell "not joined yet" from "joined
// and since left or stopping").
func notReadyReason(d *StatsDoc) string {
	switch {
	case d.ReadyReason != "":
		return d.ReadyReason
	case d.Live != nil && !*d.Live && strings.Contains(d.LiveReason, "session lost"):
		return d.LiveReason
	case len(d.Partitions) > 0:
		return "its session lost, a rejoin failing, or stopping"
	case d.Totals.Claims > 0:
		return fmt.Sprintf("out of the group after %d partition claims: its session lost, a rejoin failing, or stopping", d.Totals.Claims)
	}
	return "not in the group: not joined yet, or joined with no partitions and since left or stopping"
}

// servePage renders the status page into a buffer first, so that a
// template error is a 500, not half a page.
func (h *handler) servePage(w http.ResponseWriter, r *http.Request) {
	s := h.g.Stats()
	d := newStatsDoc(&s, h.g, time.Now())
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, newPageData(d, &h.opts)); err != nil {
		h.opts.Logger.Error("admin: render the status page", zap.Error(err))
		http.Error(w, "admin: render the status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

// formatNum writes n with thin spaces between groups of three digits.
func formatNum(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	if len(s) <= 4 {
		if neg {
			return "-" + s
		}
		return s
	}
	var b []byte
	if neg {
		b = append(b, '-')
	}
	for i, c := range []byte(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b = append(b, "\u2009"...)
		}
		b = append(b, c)
	}
	return string(b)
}
