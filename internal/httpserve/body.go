package httpserve

import (
	"bytes"
	"net/http"
)

// keptBody is a request's body once read whole (KeepBody): code that decodes it reads the
// bytes where they lie (Body), and a handler after it reads it as any body.
type keptBody struct {
	*bytes.Reader
	data []byte
}

func (*keptBody) Close() error { return nil }

// KeepBody gives r its body, read whole, as a body to read again.
func KeepBody(r *http.Request, body []byte) {
	r.Body = &keptBody{Reader: bytes.NewReader(body), data: body}
}

// Body is r's body as KeepBody kept it; nil for a request whose body was not kept.
func Body(r *http.Request) []byte {
	if b, ok := r.Body.(*keptBody); ok {
		return b.data
	}
	return nil
}
