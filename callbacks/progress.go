package callbacks

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/fulgur-ml/fulgur/trainer"
)

// ProgressBarConfig configures a ProgressBar.
type ProgressBarConfig struct {
	// Out receives the bar. nil: os.Stderr.
	Out io.Writer
	// Terminal forces the redrawn one-line bar (true) or plain lines
	// (false). nil: the bar when Out is a terminal.
	Terminal *bool
	// RefreshEvery redraws the bar every this many batches on a terminal,
	// and writes a line every this many batches otherwise. 0: 1 on a
	// terminal, the trainer's LogEveryNSteps otherwise.
	RefreshEvery int
	// Metrics are extra metric names shown after the loss when logged
	// (for example "train_acc"). Validation metrics are always printed.
	Metrics []string
	// Now is the clock. nil: time.Now.
	Now func() time.Time
}

// ProgressBar shows training progress on rank 0: a bar redrawn in place on
// a terminal, or one plain line every RefreshEvery batches otherwise (logs
// of batch jobs). It replaces the trainer's built-in display. The zero
// ProgressBar (&callbacks.ProgressBar{}) is NewProgressBar's with a zero
// ProgressBarConfig.
type ProgressBar struct {
	cfg      ProgressBarConfig
	tty      bool
	start    time.Time
	first    int // first batch of this epoch run in this process (resume)
	maxWidth int
	ready    bool // defaults filled (a struct literal's at its first hook)
}

var (
	_ trainer.ProgressDisplay     = (*ProgressBar)(nil)
	_ trainer.TrainEpochStartHook = (*ProgressBar)(nil)
	_ trainer.TrainBatchEndHook   = (*ProgressBar)(nil)
	_ trainer.StepEndStopper      = (*ProgressBar)(nil)
	_ trainer.ValidationEndHook   = (*ProgressBar)(nil)
	_ trainer.FitEndHook          = (*ProgressBar)(nil)
)

// NewProgressBar validates cfg and returns the callback.
func NewProgressBar(cfg ProgressBarConfig) (*ProgressBar, error) {
	if cfg.RefreshEvery < 0 {
		return nil, fmt.Errorf("ProgressBar RefreshEvery is %d: use 0 (the default) or more", cfg.RefreshEvery)
	}
	p := &ProgressBar{cfg: cfg}
	p.defaults()
	return p, nil
}

// defaults fills the configuration's zero fields, once.
func (p *ProgressBar) defaults() {
	if p.ready {
		return
	}
	p.ready = true
	if p.cfg.Out == nil {
		p.cfg.Out = os.Stderr
	}
	if p.cfg.Now == nil {
		p.cfg.Now = time.Now
	}
	if p.cfg.Terminal != nil {
		p.tty = *p.cfg.Terminal
	} else if f, ok := p.cfg.Out.(*os.File); ok {
		p.tty = term.IsTerminal(int(f.Fd()))
	}
}

func (p *ProgressBar) Name() string { return "ProgressBar" }

// StopsAtStepEnd is false: it only draws (trainer.StepEndStopper).
func (p *ProgressBar) StopsAtStepEnd() bool { return false }

func (p *ProgressBar) DisplaysProgress() bool { return true }

func (p *ProgressBar) OnTrainEpochStart(ctx context.Context, s *trainer.State) error {
	p.defaults()
	p.start, p.first = p.cfg.Now(), -1
	return nil
}

func (p *ProgressBar) every(s *trainer.State) int {
	switch {
	case p.cfg.RefreshEvery > 0:
		return p.cfg.RefreshEvery
	case p.tty:
		return 1
	}
	return max(s.LogEveryNSteps, 1)
}

func (p *ProgressBar) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	p.defaults()
	if !s.IsGlobalZero {
		return nil
	}
	if p.first < 0 {
		p.first = s.BatchIdx
	}
	done, total := s.BatchIdx+1, s.NumTrainBatches
	if done%p.every(s) != 0 && done != total {
		return nil
	}
	el := p.cfg.Now().Sub(p.start)
	ran := done - p.first
	rate := 0.0
	var eta time.Duration
	if el > 0 && ran > 0 {
		rate = float64(ran) / el.Seconds()
		eta = time.Duration(float64(el) / float64(ran) * float64(total-done))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "loss=%.4f", s.Loss)
	for _, k := range p.cfg.Metrics {
		if v, ok := s.Metrics.Get(k); ok {
			fmt.Fprintf(&b, " %s=%.4f", k, v)
		}
	}
	epochs := "?"
	if s.MaxEpochs > 0 {
		epochs = fmt.Sprint(s.MaxEpochs - 1) // the last epoch's index: epochs count from 0
	}
	if p.tty {
		const width = 24
		fill := width * done / max(total, 1)
		line := fmt.Sprintf("Epoch %d/%s [%s%s] %d/%d %s %.1f it/s ETA %s", s.Epoch, epochs,
			strings.Repeat("=", fill), strings.Repeat(" ", width-fill), done, total, b.String(), rate, eta.Round(time.Second))
		pad := max(p.maxWidth-len(line), 0)
		p.maxWidth = max(p.maxWidth, len(line))
		_, err := fmt.Fprintf(p.cfg.Out, "\r%s%s", line, strings.Repeat(" ", pad))
		return err
	}
	_, err := fmt.Fprintf(p.cfg.Out, "epoch %d/%s batch %d/%d step %d %s %.1f it/s eta %s\n", s.Epoch, epochs, done, total, s.GlobalStep, b.String(), rate, eta.Round(time.Second))
	return err
}

func (p *ProgressBar) OnValidationEnd(ctx context.Context, s *trainer.State) error {
	p.defaults()
	if !s.IsGlobalZero || s.SanityChecking {
		return nil
	}
	var keys []string
	for _, k := range s.Metrics.Names() {
		if strings.HasPrefix(k, "val") {
			keys = append(keys, k)
		}
	}
	var b strings.Builder
	if p.tty {
		b.WriteString("\n")
		p.maxWidth = 0
	}
	fmt.Fprintf(&b, "validation epoch %d step %d", s.Epoch, s.GlobalStep)
	for _, k := range keys {
		v, _ := s.Metrics.Get(k)
		fmt.Fprintf(&b, " %s=%.4f", k, v)
	}
	b.WriteString("\n")
	_, err := io.WriteString(p.cfg.Out, b.String())
	return err
}

func (p *ProgressBar) OnFitEnd(ctx context.Context, s *trainer.State) error {
	p.defaults()
	if s.IsGlobalZero && p.tty && p.maxWidth > 0 {
		_, err := fmt.Fprintln(p.cfg.Out)
		return err
	}
	return nil
}
