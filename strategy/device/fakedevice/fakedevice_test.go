package fakedevice_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/device"
	"github.com/fulgur-ml/fulgur/strategy/device/fakedevice"
)

func TestFaults(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      []fakedevice.Option
		victim    int
		okRuns    int // units of work the victim completes
		wantInErr string
	}{
		{"FailAt", []fakedevice.Option{fakedevice.FailAt(2)}, 2, 0, "fake:2"},
		{"FailAfter", []fakedevice.Option{fakedevice.FailAfter(0, 3)}, 0, 3, "fake:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			devs, err := fakedevice.New(3, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			done := make([]int, len(devs))
			for step := 0; step < 5; step++ {
				for i, d := range devs {
					err := d.Do(ctx, func() error { done[i]++; return nil })
					failed := i == tc.victim && step >= tc.okRuns
					if failed != (err != nil) {
						t.Fatalf("step %d device %d: err = %v, want failure %v", step, i, err, failed)
					}
					if err != nil && (!errors.Is(err, device.ErrFailed) || !strings.Contains(err.Error(), tc.wantInErr)) {
						t.Fatalf("error %q does not wrap ErrFailed or name %s", err, tc.wantInErr)
					}
				}
			}
			for i, n := range done {
				want := 5
				if i == tc.victim {
					want = tc.okRuns
				}
				if n != want {
					t.Errorf("device %d ran %d units of work, want %d", i, n, want)
				}
			}
		})
	}
}

func TestBadOptions(t *testing.T) {
	for _, tc := range []struct {
		n    int
		opts []fakedevice.Option
		want string
	}{
		{0, nil, "use 1 or more"},
		{2, []fakedevice.Option{fakedevice.FailAt(2)}, "outside 0..1"},
		{2, []fakedevice.Option{fakedevice.FailAfter(1, -1)}, "0 or more"},
	} {
		_, err := fakedevice.New(tc.n, tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%d, ...) error = %v, want one containing %q", tc.n, err, tc.want)
		}
	}
}

func TestWorkErrorPassesThrough(t *testing.T) {
	devs, _ := fakedevice.New(1)
	want := errors.New("boom")
	if err := devs[0].Do(context.Background(), func() error { return want }); err != want {
		t.Fatalf("Do returned %v, want the work's own error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := devs[0].Do(ctx, func() error { t.Fatal("ran after cancel"); return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Do on a cancelled context returned %v", err)
	}
}
