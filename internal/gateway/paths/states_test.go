package paths

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A sealed server state opens only for the project, session, server and call it was sealed
// for, only as it was given, and only within its lifetime; each misfit is named.
func TestOpenState(t *testing.T) {
	issued := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	b := stateBinding{Project: "ns/p", Session: "s-1", Server: "a", Call: `"a__elicit" (tools/call)`, now: issued, lifetime: time.Minute}
	sealed := sealState(b, "the server's own")
	with := func(change func(*stateBinding)) stateBinding { c := b; change(&c); return c }
	theirs := sealState(with(func(c *stateBinding) { c.Epoch = 5 }), "the server's own")
	otherReplicas := flipLast(theirs) // their key's MAC, not this process's
	for _, c := range []struct {
		what   string
		b      stateBinding
		sealed string
		want   string // the error's words; "" opens
	}{
		{"its own", b, sealed, ""},
		{"another project's", with(func(c *stateBinding) { c.Project = "ns/q" }), sealed, "not issued by this project's endpoint"},
		{"another session's", with(func(c *stateBinding) { c.Session = "s-2" }), sealed, "issued to another session"},
		{"another server's", with(func(c *stateBinding) { c.Server = "b" }), sealed, `issued for MCP server "a", not "b"`},
		{"another call's", with(func(c *stateBinding) { c.Call = `"a__sample" (tools/call)` }), sealed, `belongs to a call of "a__elicit"`},
		{"sealed under an earlier claim on the project", with(func(c *stateBinding) { c.Epoch = 2 }), sealed, "issued before this project moved between replicas (epoch 0, now 2)"},
		{"sealed by another replica (another key) under its claim", b, otherReplicas, "issued before this project moved between replicas (epoch 5, now 0)"},
		{"at the end of its lifetime", with(func(c *stateBinding) { c.now = issued.Add(time.Minute) }), sealed, ""},
		{"past its lifetime", with(func(c *stateBinding) { c.now = issued.Add(time.Minute + time.Millisecond) }), sealed, "has expired: a server's state is good for 1m0s"},
		{"altered", b, flipLast(sealed), "altered"},
		{"payload swapped", b, serverStatePrefix + "e30." + strings.SplitN(strings.TrimPrefix(sealed, serverStatePrefix), ".", 2)[1], "altered"},
		{"unsealed", b, "the server's own", "not issued by this gateway"},
		{"no mac", b, serverStatePrefix + "e30", "not issued by this gateway"},
	} {
		state, err := openState(c.b, c.sealed)
		switch {
		case c.want == "" && (err != nil || state != "the server's own"):
			t.Errorf("%s: %q (%v), want it opened", c.what, state, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %q (%v), want an error saying %q", c.what, state, err, c.want)
		}
	}
}

// flipLast is s with its last character changed (to "A", or to "B" when it was "A" already:
// a fixed replacement left one state in 64 as it was).
func flipLast(s string) string {
	if strings.HasSuffix(s, "A") {
		return s[:len(s)-1] + "B"
	}
	return s[:len(s)-1] + "A"
}

// A raw result's top-level requestState is sealed (the gateway's own state a bridged round
// gives and nested members are not; a server's that looks like the gateway's is), and
// the raw state a request brings opens to the server's own, a JSON string again.
func TestRawStates(t *testing.T) {
	b := stateBinding{Project: "ns/p", Session: "s-1", Server: "a", Call: "c"}
	const held = "projectmcp-input.held" // a bridged round's, noted by bridge
	for _, c := range []struct {
		res    string
		sealed bool
	}{
		{`{"content":[]}`, false},
		{`{"inputRequests":{},"requestState":"srv"}`, true},
		{`{"requestState":"projectmcp-input.held"}`, false},
		{`{"requestState":"projectmcp-input.x.y"}`, true},
		{`{"structuredContent":{"requestState":"srv"}}`, false},
		{`{"requestState":17}`, false},
	} {
		out := sealResultJSON(b, []byte(c.res), held)
		var got struct {
			RequestState json.RawMessage `json:"requestState"`
		}
		_ = json.Unmarshal(out, &got)
		if sealed := strings.HasPrefix(string(got.RequestState), `"`+serverStatePrefix); sealed != c.sealed {
			t.Errorf("%s: %s, want sealed %v", c.res, out, c.sealed)
			continue
		}
		if !c.sealed {
			if string(out) != c.res {
				t.Errorf("%s: changed to %s", c.res, out)
			}
			continue
		}
		var want string
		_ = json.Unmarshal([]byte(c.res), &struct {
			RequestState *string `json:"requestState"`
		}{&want})
		opened, ok := openStateJSON(b, got.RequestState)
		if wantJSON, _ := json.Marshal(want); !ok || string(opened) != string(wantJSON) {
			t.Errorf("%s: opened to %s (%v), want the server's own", c.res, opened, ok)
		}
	}
	for _, unsealed := range []string{`"srv"`, `"projectmcp-input.x.y"`} {
		if _, ok := openStateJSON(b, json.RawMessage(unsealed)); ok {
			t.Errorf("an unsealed state must not open: %s", unsealed)
		}
	}
}

// A request's state is the gateway's own only while the inputs table holds it: a string that
// merely has the gateway's form is refused, as resume words it, never passed on; a server's
// state of that form comes back sealed and opens to the server's own.
func TestOpenRequestState(t *testing.T) {
	in := &inputs{tag: "t", epoch: func() int64 { return 2 }, timeout: time.Minute, parked: map[string]*pendingCall{"projectmcp-input.t.2.held": {}}}
	p := &Paths{opts: Options{InputTimeout: time.Minute}, inputs: in}
	b := stateBinding{Project: "ns/p", Session: "s-1", Server: "a", Call: "c"}
	for _, c := range []struct {
		what, state string
		want        string // the state opened; "" refused
		own         bool
		refusal     string
	}{
		{"the gateway's own, held", "projectmcp-input.t.2.held", "projectmcp-input.t.2.held", true, ""},
		{"lapsed or forged, of the gateway's form", "projectmcp-input.t.2.forged", "", false, "unknown or has expired (a call waits 1m0s"},
		{"of another project's form", "projectmcp-input.a.elicit", "", false, "not issued by this project's endpoint"},
		{"of an earlier claim", "projectmcp-input.t.1.x", "", false, "issued before this project moved between replicas"},
		{"a server's state of the gateway's form, sealed", sealState(b, "projectmcp-input.t.2.srv"), "projectmcp-input.t.2.srv", false, ""},
		{"a server's state, unsealed", "srv", "", false, "not issued by this gateway"},
	} {
		opened, own, refused := p.openRequestState(b, c.state)
		switch {
		case c.want != "" && (refused != nil || opened != c.want || own != c.own):
			t.Errorf("%s: %q own %v (%v), want %q own %v", c.what, opened, own, refused, c.want, c.own)
		case c.want == "" && (refused == nil || !strings.Contains(refused.Error(), c.refusal) || opened != ""):
			t.Errorf("%s: %q (%v), want refused saying %q", c.what, opened, refused, c.refusal)
		}
	}
}
