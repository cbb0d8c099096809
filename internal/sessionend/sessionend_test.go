package sessionend

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A refusal of any request of the session's tells the supervisor at once, with the server's
// answer: where the SDK alone failed the whole connection on it, the request alone fails, so
// a refused notification or answer to the server would otherwise go unseen until a probe.
func TestRefusalTellsTheSupervisor(t *testing.T) {
	end := New()
	rec := httptest.NewRecorder()
	rec.WriteHeader(http.StatusForbidden)
	_, _ = rec.WriteString(`{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"scope missing"}}`)
	err := (&endWatch{end: end}).Authorize(context.Background(), nil, rec.Result())
	select {
	case <-end.refused:
	default:
		t.Fatal("the refusal was not told")
	}
	if want := "the server answered 403 Forbidden: scope missing"; err == nil || err.Error() != want || !errors.Is(end.refusal, err) {
		t.Fatalf("refusal %v (told %v), want %q", err, end.refusal, want)
	}
	select {
	case <-end.done:
		t.Fatal("a refusal is not the session's end")
	default:
	}
}

// A transport's connection tells its close; a streamable HTTP transport's, the end of the
// context the SDK hands its OAuth handler before every request.
func TestWatchTellsTheEnd(t *testing.T) {
	end := New()
	client, _ := mcp.NewInMemoryTransports()
	c, err := end.Watch(client).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-end.Done():
		t.Fatal("the end was told before the close")
	default:
	}
	_ = c.Close()
	select {
	case <-end.Done():
	default:
		t.Fatal("the close was not told")
	}

	end = New()
	watched, ok := end.Watch(&mcp.StreamableClientTransport{Endpoint: "http://127.0.0.1:1/mcp"}).(*mcp.StreamableClientTransport)
	if !ok || watched.OAuthHandler == nil {
		t.Fatalf("a streamable transport watched through %T, want its OAuth handler", watched)
	}
	ctx, cancel := context.WithCancel(context.Background())
	for range 2 { // asked before every request
		if ts, err := watched.OAuthHandler.TokenSource(ctx); ts != nil || err != nil {
			t.Fatalf("the handler gave a token source %v, %v: it adds no credential", ts, err)
		}
	}
	cancel()
	select {
	case <-end.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the end of the connection's context was not told")
	}
}
