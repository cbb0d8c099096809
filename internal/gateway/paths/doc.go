// Package paths is one request's life at a project's endpoint, from its facts to its answer:
// read gathers a POST's facts, decide (a pure planner) chooses the path, and the request is
// forwarded as bytes (forward.go, forwardrequest.go) or executed through the SDK's typed
// handlers (typed.go); both run through dispatch (admit, trace, timeout, the session's slot,
// one resend when a swap replaced the connection, metrics, audit), and every failure becomes
// the session's answer in one place (respond.go). A server asking the session for input is
// carried on the call's own stream (asks.go) or in input rounds (input.go, states.go), and
// bridged between the two protocol revisions (bridge.go, caps.go).
//
// It reaches its endpoint only through Endpoint (the session table, the published Routes, the
// session's slots, the replica's claim) and holds nothing that outlives the calls it serves;
// it never imports the registry or the gateway. The endpoint owns one Paths and ends what a
// session kept when the session ends.
package paths
