package tenure

import (
	"context"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Lock is a Lease lock for client-go's leader election that keeps a Tenure: a Create
// or Update that names this process as the holder extends it from the moment the
// request was sent; one that names another (a release) ends it before it is sent; and
// a Get that shows another holder ends it at once, without waiting for the elector's
// renew deadline. OnForeign, if set, is called after such a Get.
type Lock struct {
	resourcelock.Interface
	Tenure    *Tenure
	OnForeign func()
}

var _ resourcelock.Interface = &Lock{}

func (l *Lock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	record, raw, err := l.Interface.Get(ctx)
	if err == nil && record.HolderIdentity != l.Identity() {
		l.Tenure.End()
		if l.OnForeign != nil {
			l.OnForeign()
		}
	}
	return record, raw, err
}

func (l *Lock) Create(ctx context.Context, record resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, record, l.Interface.Create)
}

func (l *Lock) Update(ctx context.Context, record resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, record, l.Interface.Update)
}

func (l *Lock) write(ctx context.Context, record resourcelock.LeaderElectionRecord, write func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	if record.HolderIdentity != l.Identity() {
		l.Tenure.End()
		return write(ctx, record)
	}
	sent := l.Tenure.clock.Now()
	err := write(ctx, record)
	if err == nil {
		l.Tenure.Extend(sent, time.Duration(record.LeaseDurationSeconds)*time.Second)
	}
	return err
}
