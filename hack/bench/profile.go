package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// profiler takes CPU profiles of the apiserver and of the controller while a case
// runs (--profile), for `go tool pprof`.
type profiler struct {
	wg sync.WaitGroup
}

// startProfiles profiles the apiserver and, when it serves profiles, the controller,
// each for d, into <out>/<session>-<what>-{apiserver,controller}.pprof. wait returns
// once both are written.
func startProfiles(ctx context.Context, s *session, what string, d time.Duration) *profiler {
	p := &profiler{}
	seconds := max(1, int(d.Round(time.Second)/time.Second))
	save := func(who string, data []byte, err error) {
		path := filepath.Join(s.cfg.outDir, fmt.Sprintf("%s-%s-%s.pprof", s.name, what, who))
		if err == nil {
			err = os.WriteFile(path, data, 0o644)
		}
		if err != nil {
			progressf("%s: profiling the %s: %v", s.name, who, err)
			return
		}
		progressf("%s: wrote %s", s.name, path)
	}
	p.wg.Go(func() {
		data, err := s.kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", fmt.Sprint(seconds)).Timeout(d + time.Minute).DoRaw(ctx)
		save("apiserver", data, err)
	})
	switch {
	case s.limit != nil:
		return p
	case s.ctrl == nil:
		progressf("%s: the controller serves no metrics, so no profile of it", s.name)
		return p
	}
	url := strings.TrimSuffix(s.ctrl.MetricsURL, "/metrics") + fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds)
	p.wg.Go(func() {
		data, err := getBody(ctx, url)
		save("controller", data, err)
	})
	return p
}

func (p *profiler) wait() { p.wg.Wait() }

// getBody returns the body of a GET of url, which must answer 200.
func getBody(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}
