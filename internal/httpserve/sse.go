package httpserve

import "net/http"

// EventStream writes a response as a text/event-stream (the server-sent events framing),
// event by event. Until SendAtOnce, what it writes is held by net/http for the handler's
// return, which sends it in one write with the stream's end: a stream opened only for an
// answer costs one write, not one per event.
type EventStream struct {
	w http.ResponseWriter
	f http.Flusher // nil: what is written goes when the handler returns
}

// StartEvents writes the stream's header (200, text/event-stream, no-cache).
func StartEvents(w http.ResponseWriter) *EventStream {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &EventStream{w: w}
}

// SendAtOnce makes every later write reach the client at once, where w can flush.
func (s *EventStream) SendAtOnce() { s.f, _ = s.w.(http.Flusher) }

// Event writes one message event, with an id unless id is "".
func (s *EventStream) Event(id string, data []byte) {
	buf := make([]byte, 0, len(data)+len(id)+32)
	if id != "" {
		buf = append(buf, "id: "...)
		buf = append(buf, id...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "event: message\ndata: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	s.Write(buf)
}

// Write writes one whole frame (an event, or a priming line such as a retry field).
func (s *EventStream) Write(frame []byte) {
	_, _ = s.w.Write(frame)
	s.Flush()
}

// Flush sends what is written so far, once SendAtOnce was called.
func (s *EventStream) Flush() {
	if s.f != nil {
		s.f.Flush()
	}
}
