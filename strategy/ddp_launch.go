package strategy

import "context"

type launcher struct{}

func (l *launcher) wait(ctx context.Context) error { return nil }
