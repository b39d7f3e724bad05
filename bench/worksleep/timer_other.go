//go:build !linux

package worksleep

import (
	"context"
	"time"
)

func sleep(ctx context.Context, d time.Duration) error { return timerSleep(ctx, d) }
