// Lock: client-go's Lease lock, keeping the Tenure from its writes and reads.

package tenure

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Lock is a Lease lock for client-go's leader election that keeps a Tenure: an Update
// that names this process as the holder extends it from the moment the request was
// sent, and a Create that does begins it one Lease duration later (Tenure.Created); a
// write that names another (a release) ends it before it is sent; and a Get that shows
// another holder, or no Lease at all, ends it at once, without waiting for the
// elector's renew deadline. OnForeign, if set, is called after such a Get.
type Lock struct {
	resourcelock.Interface
	Tenure    *Tenure
	OnForeign func()
}

var _ resourcelock.Interface = &Lock{}

func (l *Lock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	record, raw, err := l.Interface.Get(ctx)
	if (err == nil && record.HolderIdentity != l.Identity()) || apierrors.IsNotFound(err) {
		l.Tenure.End()
		if l.OnForeign != nil {
			l.OnForeign()
		}
	}
	return record, raw, err
}

func (l *Lock) Create(ctx context.Context, record resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, record, l.Interface.Create, l.Tenure.Created)
}

func (l *Lock) Update(ctx context.Context, record resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, record, l.Interface.Update, l.Tenure.Extend)
}

func (l *Lock) write(ctx context.Context, record resourcelock.LeaderElectionRecord, write func(context.Context, resourcelock.LeaderElectionRecord) error, held func(sent time.Time, d time.Duration)) error {
	if record.HolderIdentity != l.Identity() {
		l.Tenure.End()
		return write(ctx, record)
	}
	sent := l.Tenure.clock.Now()
	err := write(ctx, record)
	if err == nil {
		held(sent, time.Duration(record.LeaseDurationSeconds)*time.Second)
	}
	return err
}
