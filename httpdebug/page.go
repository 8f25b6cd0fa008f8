package httpdebug

import (
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/recordlock/recordlock"
)

// The HTML page. html/template escapes every value by its context, in the tables and in the SVG
// alike, so a key or Txn name that looks like markup is shown as text.

type pageView struct {
	TakenAt   string // as pageTime gives it
	Refresh   int
	Limit     int
	Databases []databaseView
}

type databaseView struct {
	Index        int // numbers the SVG marker of the database's graph, which must be unique on the page
	Name         string
	Stats        []statView
	Locks        []lockRow
	Waits        []waitRow
	LocksOmitted int
	WaitsOmitted int
	Graph        graph
}

type statView struct{ Name, Value string }

type lockRow struct {
	Key       keyView
	CF        string // as familyText gives it
	Mode      string
	Owner     string
	Hold      bool
	HeldFor   string
	LeaseLeft string
	Waiters   int
	Token     uint64
}

type waitRow struct {
	Key      keyView
	CF       string // as familyText gives it
	Mode     string
	Owner    string
	Waited   string
	WaitsFor string // the owners of the key's holders listed
}

// keyView is a key as a table cell shows it: shortened past cellRunes, in full in the cell's
// title (up to titleRunes).
type keyView struct{ Text, Title string }

const (
	cellRunes  = 120
	titleRunes = 4096
)

// noOwner is what the page shows for a holder or waiter outside any Txn (or in a Txn without a
// name).
const noOwner = "—"

// pageTime is how the page shows when it was taken: RFC 3339 in UTC, to the millisecond.
const pageTime = "2006-01-02T15:04:05.000Z07:00"

func writePage(w io.Writer, taken time.Time, dbs []database, limit int) error {
	v := pageView{
		TakenAt: taken.UTC().Format(pageTime),
		Refresh: refreshSeconds, Limit: limit, Databases: make([]databaseView, len(dbs)),
	}
	for i, d := range dbs {
		v.Databases[i] = viewDatabase(i, taken, d)
	}
	return page.Execute(w, v)
}

func viewDatabase(i int, taken time.Time, d database) databaseView {
	s := d.stats
	dv := databaseView{
		Index: i,
		Name:  d.name,
		Stats: []statView{
			{"held", strconv.Itoa(s.Held)},
			{"waiting", strconv.Itoa(s.Waiting)},
			{"acquired", fmtUint(s.Acquired)},
			{"contended", fmtUint(s.Contended)},
			{"wait time", fmtDuration(s.WaitTime)},
			{"timeouts", fmtUint(s.Timeouts)},
			{"canceled", fmtUint(s.Canceled)},
			{"deadlocks", fmtUint(s.Deadlocks)},
			{"lapsed", fmtUint(s.Lapsed)},
			{"revoked", fmtUint(s.Revoked)},
			{"fenced", fmtUint(s.Fenced)},
			{"hook failures", fmtUint(s.HookFailures)},
		},
		LocksOmitted: d.locksOmitted,
		WaitsOmitted: d.waitsOmitted,
		Graph:        buildGraph(d.locks, d.waits, d.families),
	}
	for _, l := range d.locks {
		mode := "exclusive"
		if l.Shared {
			mode = "shared"
		}
		if l.Scope == recordlock.ScopeCluster {
			mode += ", cluster"
		}
		dv.Locks = append(dv.Locks, lockRow{
			Key: viewKey(lockText(l.Key, l.IsRange, l.RangeEnd)), CF: familyText(l.ColumnFamilyID, l.ColumnFamily), Mode: mode,
			Owner: ownerText(l.Owner), Hold: l.Hold, HeldFor: fmtHeldFor(heldFor(taken, l.AcquiredAt)),
			LeaseLeft: fmtDuration(l.Remaining), Waiters: l.Waiters, Token: l.Token,
		})
	}
	holders := newHolderIndex(d.locks)
	// Per record and mode, not per wait: its holders are listed once.
	waitsForText := map[waitKind]string{}
	// The nearest exclusive request listed so far for each record, named: as in the graph
	// (buildGraph), a shared request listed after it queued behind it, and waits for it first.
	exclusiveAhead := map[record]string{}
	for _, w := range d.waits {
		mode := "exclusive"
		switch {
		case w.Upgrade:
			mode = "upgrade"
		case w.Shared:
			mode = "shared"
		}
		kind := kindOf(w)
		waitsFor, ok := waitsForText[kind]
		if !w.Shared {
			exclusiveAhead[kind.r] = waiterText(w.Owner)
		} else if ahead, queued := exclusiveAhead[kind.r]; queued {
			waitsFor, ok = "queued behind "+ahead, true
		}
		if !ok {
			var owners []string
			for _, i := range holders.of(w) {
				owner := d.locks[i].Owner
				if owner == "" {
					owner = "a lock outside any Txn"
				}
				owners = append(owners, owner)
			}
			waitsFor = holdersText(owners)
			waitsForText[kind] = waitsFor
		}
		dv.Waits = append(dv.Waits, waitRow{
			Key: viewKey(lockText(w.Key, w.IsRange, w.RangeEnd)), CF: familyText(w.ColumnFamilyID, d.families[w.ColumnFamilyID]),
			Mode: mode, Owner: ownerText(w.Owner),
			Waited: fmtDuration(w.Waited), WaitsFor: waitsFor,
		})
	}
	return dv
}

// shownHolders is how many holders a row of the waits table names; the rest are counted, so that
// a row stays short however many sharers its key has.
const shownHolders = 3

// holdersText names the holders of a record a wait waits for, as the waits table shows them.
func holdersText(owners []string) string {
	switch {
	case len(owners) == 0:
		return "(holder not listed)"
	case len(owners) > shownHolders:
		return fmt.Sprintf("%s and %d more", strings.Join(owners[:shownHolders], ", "), len(owners)-shownHolders)
	}
	return strings.Join(owners, ", ")
}

// viewKey shows text, a key or range as lockText gives it.
func viewKey(text string) keyView {
	short := shorten(text, cellRunes)
	if short == text {
		return keyView{Text: text}
	}
	return keyView{Text: short, Title: shorten(text, titleRunes)}
}

// waiterText names the owner of a request a shared request queued behind.
func waiterText(owner string) string {
	if owner == "" {
		return "a Lock outside any Txn"
	}
	return owner
}

func ownerText(owner string) string {
	if owner == "" {
		return noOwner
	}
	return owner
}

// familyText names the column family with ID id and name name: "orders (2)", or "2 (name
// unknown)" when the page read no name for it (database.families).
func familyText(id uint32, name string) string {
	if name == "" {
		return fmt.Sprintf("%d (name unknown)", id)
	}
	return fmt.Sprintf("%s (%d)", name, id)
}

func fmtUint(n uint64) string { return strconv.FormatUint(n, 10) }

// fmtDuration rounds d to a millisecond, or to a microsecond below one.
func fmtDuration(d time.Duration) string {
	if d < time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// fmtHeldFor shows how long a lock has been held as fmtDuration does, and from a minute on to
// the second: 3m4s.
func fmtHeldFor(d time.Duration) string {
	if d < time.Minute {
		return fmtDuration(d)
	}
	return d.Round(time.Second).String()
}

var page = template.Must(template.New("page").Parse(pageTemplate))

const pageTemplate = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{{.Refresh}}">
<link rel="icon" href="data:,">
<title>recordlock: locks and waits</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d2330; }
h1 { font-size: 1.3em; margin: 0 0 .2em; }
h2 { font-size: 1.15em; margin: 1.6em 0 .4em; border-bottom: 1px solid #ccd; }
h3 { font-size: 1em; margin: 1.2em 0 .4em; }
.note, .omitted, .empty { color: #5a6270; }
dl.stats { display: flex; flex-wrap: wrap; gap: .4em 1.4em; margin: 0; }
dl.stats div { display: flex; gap: .4em; }
dl.stats dt { color: #5a6270; }
dl.stats dd { margin: 0; font-variant-numeric: tabular-nums; }
table { border-collapse: collapse; }
th, td { text-align: left; padding: .2em .8em .2em 0; border-bottom: 1px solid #e4e6eb; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.key { font-family: ui-monospace, monospace; word-break: break-all; }
div.waitgraph { overflow: auto; max-height: 80vh; }
svg.graph { display: block; }
svg text { font: 12px system-ui, sans-serif; }
.node rect { stroke-width: 1.5; }
.node.txn rect { fill: #e3edff; stroke: #3465c8; }
.node.holder rect, .node.waiter rect { fill: #f2f3f5; stroke: #6b7280; }
.node.holder rect { stroke-dasharray: 5 3; }
.node.key rect { fill: #fff; stroke: #9ca3af; stroke-dasharray: 2 3; }
.node text.sub { fill: #5a6270; font-size: 10px; }
.edge path { fill: none; stroke: #b4442c; stroke-width: 1.5; }
.edge text { fill: #b4442c; font-size: 11px; paint-order: stroke; stroke: #fff; stroke-width: 3px; }
</style>
</head>
<body>
<h1>recordlock: locks and waits</h1>
<p class="note">Taken at <time datetime="{{.TakenAt}}">{{.TakenAt}}</time>. Reloads every {{.Refresh}} s. At most {{.Limit}} holders and {{.Limit}} waits per database.
<a href="?format=json&amp;limit={{.Limit}}">JSON</a></p>
{{range $db := .Databases}}
<section class="database" id="database-{{$db.Index}}">
<h2>{{$db.Name}}</h2>
<dl class="stats">{{range $db.Stats}}<div><dt>{{.Name}}</dt><dd>{{.Value}}</dd></div>{{end}}</dl>

<h3>Who waits for whom</h3>
{{with $db.Graph}}{{if .Nodes}}<div class="waitgraph"><svg class="graph" xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="wait-for graph of {{$db.Name}}">
<defs><marker id="arrow-{{$db.Index}}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#b4442c"/></marker></defs>
{{range .Edges}}<g class="edge"><title>{{.Title}}</title><path d="{{.Path}}" marker-end="url(#arrow-{{$db.Index}})"/><text x="{{.LabelX}}" y="{{.LabelY}}" text-anchor="middle">{{.Label}}</text></g>
{{end}}{{range .Nodes}}<g class="node {{.Kind}}"><title>{{.Title}}</title><rect x="{{.X}}" y="{{.Y}}" width="{{$db.Graph.NodeWidth}}" height="{{$db.Graph.NodeHeight}}" rx="6"/><text class="label" x="{{.X}}" y="{{.Y}}" dx="8" dy="16">{{.Label}}</text><text class="sub" x="{{.X}}" y="{{.Y}}" dx="8" dy="31">{{.Sub}}</text></g>
{{end}}</svg></div>
<p class="note">An arrow runs from a waiter to a holder it waits for; “+N” on it counts the other holders it waits for too. Holders nobody waits for are not drawn.</p>
{{else}}<p class="empty">Nobody waits.</p>{{end}}{{end}}

<h3>Holders</h3>
{{if $db.Locks}}<table class="locks">
<thead><tr><th>key</th><th>column family</th><th>mode</th><th>owner</th><th>hold</th><th>held for</th><th>lease left</th><th>waiters</th><th>token</th></tr></thead>
<tbody>
{{range $db.Locks}}<tr><td class="key"{{with .Key.Title}} title="{{.}}"{{end}}>{{.Key.Text}}</td><td>{{.CF}}</td><td>{{.Mode}}</td><td class="owner">{{.Owner}}</td><td>{{if .Hold}}yes{{else}}no{{end}}</td><td class="num">{{.HeldFor}}</td><td class="num">{{.LeaseLeft}}</td><td class="num">{{.Waiters}}</td><td class="num">{{.Token}}</td></tr>
{{end}}</tbody>
</table>{{else}}<p class="empty">Nothing is held.</p>{{end}}
{{with $db.LocksOmitted}}<p class="omitted">{{.}} more holders not listed.</p>{{end}}

<h3>Waits</h3>
{{if $db.Waits}}<table class="waits">
<thead><tr><th>key</th><th>column family</th><th>mode</th><th>owner</th><th>waited</th><th>waits for</th></tr></thead>
<tbody>
{{range $db.Waits}}<tr><td class="key"{{with .Key.Title}} title="{{.}}"{{end}}>{{.Key.Text}}</td><td>{{.CF}}</td><td>{{.Mode}}</td><td class="owner">{{.Owner}}</td><td class="num">{{.Waited}}</td><td>{{.WaitsFor}}</td></tr>
{{end}}</tbody>
</table>{{else}}<p class="empty">Nobody waits.</p>{{end}}
{{with $db.WaitsOmitted}}<p class="omitted">{{.}} more waits not listed.</p>{{end}}
</section>
{{else}}<p class="empty">No database.</p>
{{end}}
</body>
</html>
`
