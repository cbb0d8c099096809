package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dsh-dev/projectmcp/internal/httpserve"
)

// A POST's body is read whole, whatever its length says: a declared length it keeps, one over
// the bound and a body that ends short of its declared length are refused with the status
// that says so.
func TestReadBody(t *testing.T) {
	const bound = 64
	small := strings.Repeat("a", 40)
	big := strings.Repeat("b", bound+1)
	for name, tc := range map[string]struct {
		body     string
		declared int64 // -1: unknown (chunked)
		status   int   // 0: read
	}{
		"declared":                  {body: small, declared: int64(len(small))},
		"chunked":                   {body: small, declared: -1},
		"empty":                     {body: "", declared: 0},
		"declared over the bound":   {body: big, declared: int64(len(big)), status: http.StatusRequestEntityTooLarge},
		"chunked over the bound":    {body: big, declared: -1, status: http.StatusRequestEntityTooLarge},
		"declared over what it has": {body: small, declared: int64(len(small)) + 10, status: http.StatusBadRequest},
		"declared past what is taken up front": {body: big, declared: maxDeclaredBody + 1,
			status: http.StatusRequestEntityTooLarge},
	} {
		t.Run(name, func(t *testing.T) {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/", io.NopCloser(strings.NewReader(tc.body)))
			r.ContentLength = tc.declared
			r.Body = http.MaxBytesReader(w, r.Body, bound)
			ok := readBody(w, r)
			if tc.status != 0 {
				if ok || w.Code != tc.status {
					t.Fatalf("read %v, status %d: want refused with %d", ok, w.Code, tc.status)
				}
				return
			}
			got, _ := io.ReadAll(r.Body)
			if !ok || string(got) != tc.body || string(httpserve.Body(r)) != tc.body {
				t.Fatalf("read %v: %q, want %q", ok, got, tc.body)
			}
		})
	}
}
