// etcd's maintenance through its gRPC gateway: a compaction on demand.

package localcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// CompactEtcd compacts etcd's history up to its current revision and waits until the
// compaction is done on disk: what the apiserver asks of etcd every 5 minutes, at once.
// It returns the revision compacted to. It talks to etcd's gRPC gateway, which etcd
// serves on its client URL.
func (c *Cluster) CompactEtcd(ctx context.Context) (int64, error) {
	// A compaction of a long history takes seconds; an etcd that answers nothing for
	// minutes is broken.
	ctx, cancel := context.WithTimeout(ctx, etcdCompactTimeout)
	defer cancel()
	var status struct {
		Header struct {
			Revision string `json:"revision"` // int64 travels as a string
		} `json:"header"`
	}
	if err := c.etcdCall(ctx, "/v3/maintenance/status", struct{}{}, &status); err != nil {
		return 0, fmt.Errorf("reading etcd's revision: %w", err)
	}
	revision, err := strconv.ParseInt(status.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcd's revision %q: %w", status.Header.Revision, err)
	}
	compaction := struct {
		Revision string `json:"revision"`
		Physical bool   `json:"physical"`
	}{strconv.FormatInt(revision, 10), true}
	err = c.etcdCall(ctx, "/v3/kv/compaction", compaction, nil)
	if err != nil && !strings.Contains(err.Error(), errEtcdCompacted) {
		return 0, fmt.Errorf("compacting etcd to revision %d: %w", revision, err)
	}
	// Refused as compacted already: nothing was written since the last compaction.
	return revision, nil
}

// etcdCompactTimeout bounds CompactEtcd.
const etcdCompactTimeout = 2 * time.Minute

// errEtcdCompacted is how etcd refuses a revision older than its last compaction.
const errEtcdCompacted = "required revision has been compacted"

// etcdCall posts request as JSON to etcd's gateway at path and decodes the answer into
// response, unless nil.
func (c *Cluster) etcdCall(ctx context.Context, path string, request, response any) error {
	body, err := json.Marshal(request)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.etcdURL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, bytes.TrimSpace(answer))
	}
	if response == nil {
		return nil
	}
	return json.Unmarshal(answer, response)
}
