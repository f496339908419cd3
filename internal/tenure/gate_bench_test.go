package tenure

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"
)

// answered is a transport that answers every request at once, so that a benchmark
// measures what lies in front of it.
type answered struct{}

func (answered) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("{}"))}, nil
}

// BenchmarkGate measures what the gate adds to one write: the tenure's check, the
// deadline and the timeout parameter, against the same write sent straight on. Run it
// with `go test -bench Gate ./internal/tenure/`.
func BenchmarkGate(b *testing.B) {
	held := New(clock.RealClock{})
	held.Extend(time.Now(), time.Hour)
	gate := &Gate{Required: true}
	for _, bc := range []struct {
		name      string
		transport http.RoundTripper
		ctx       context.Context
	}{
		{"ungated", answered{}, context.Background()},
		{"gated", gate.Wrap(answered{}), NewContext(context.Background(), held)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				req, err := http.NewRequestWithContext(bc.ctx, http.MethodPut, "https://127.0.0.1:6443/apis/samplecontroller.k8s.io/v1alpha1/namespaces/default/foos/web/status?fieldManager=sample-controller", nil)
				if err != nil {
					b.Fatal(err)
				}
				resp, err := bc.transport.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_ = resp.Body.Close()
			}
		})
	}
}
