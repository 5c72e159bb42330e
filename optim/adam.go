package optim

import (
	"fmt"
	"math"
)

// Zero asks for zero in a config field whose zero value means a default
// other than zero: AdamConfig's Beta1 (torch's betas=(0, β2), as GANs use),
// Beta2, and AdamW's WeightDecay (torch's AdamW(weight_decay=0)). Validate
// turns it into 0 once the defaults are filled in, so the optimizer
// computes with an exact zero, not with the constant (the smallest
// positive float64, whose products with moments would be subnormal).
const Zero = math.SmallestNonzeroFloat64

// AdamConfig configures Adam and AdamW. Zero values take torch's defaults:
// LR 1e-3, Beta1 0.9, Beta2 0.999, Eps 1e-8; WeightDecay 0 for Adam and 0.01
// for AdamW. So a zero cannot be asked for by writing 0: set Beta1, Beta2
// or AdamW's WeightDecay to optim.Zero.
type AdamConfig struct {
	LR    float64
	Beta1 float64 // in [0, 1)
	Beta2 float64 // in [0, 1)
	Eps   float64 // > 0
	// WeightDecay >= 0: coupled L2 (added to the gradient) for Adam,
	// decoupled (p *= 1 - lr*WeightDecay) for AdamW.
	WeightDecay float64
	// AMSGrad is torch's amsgrad=True: the update divides by the root of
	// the largest second moment seen so far (kept per element as the state
	// buffer "max_exp_avg_sq", which State saves and LoadState restores)
	// rather than the current one.
	AMSGrad bool
}

// Validate fills Adam's defaults and returns every problem at once.
// NewAdamW fills its own WeightDecay default before calling it.
func (c *AdamConfig) Validate() error {
	if c.LR == 0 {
		c.LR = 1e-3
	}
	if c.Beta1 == 0 {
		c.Beta1 = 0.9
	}
	if c.Beta2 == 0 {
		c.Beta2 = 0.999
	}
	if c.Eps == 0 {
		c.Eps = 1e-8
	}
	for _, f := range []*float64{&c.Beta1, &c.Beta2, &c.WeightDecay} {
		if *f == Zero {
			*f = 0
		}
	}
	var p problems
	if !finite(c.LR) || c.LR < 0 {
		p.addf("AdamConfig.LR is %v: use a learning rate > 0, such as 1e-3 (0 means 1e-3)", c.LR)
	}
	if !(c.Beta1 >= 0 && c.Beta1 < 1) {
		p.addf("AdamConfig.Beta1 is %v: use a value in [0, 1), such as 0.9 (0 means 0.9; optim.Zero means 0)", c.Beta1)
	}
	if !(c.Beta2 >= 0 && c.Beta2 < 1) {
		p.addf("AdamConfig.Beta2 is %v: use a value in [0, 1), such as 0.999 (0 means 0.999)", c.Beta2)
	}
	if !finite(c.Eps) || c.Eps < 0 {
		p.addf("AdamConfig.Eps is %v: use a small value > 0, such as 1e-8 (0 means 1e-8)", c.Eps)
	}
	if !finite(c.WeightDecay) || c.WeightDecay < 0 {
		p.addf("AdamConfig.WeightDecay is %v: use a value >= 0, such as 0.01, or 0 for none", c.WeightDecay)
	}
	return p.err()
}

// Adam is torch.optim.Adam (coupled weight decay) or, built by NewAdamW,
// torch.optim.AdamW (decoupled weight decay), step t:
//
//	p = p * (1 - lr*wd)                       (AdamW only)
//	g = g + wd*p                              (Adam only)
//	m = beta1*m + (1-beta1)*g
//	v = beta2*v + (1-beta2)*g*g
//	vmax = max(vmax, v)                       (AMSGrad only; then v = vmax below)
//	p = p - (lr/(1-beta1^t)) * m / (sqrt(v)/sqrt(1-beta2^t) + eps)
type Adam struct {
	cfg       AdamConfig
	decoupled bool
	lr        float64
	step      int64
	st        spanState
	k64       adamK64
	k32       adamK32
}

var _ Optimizer = (*Adam)(nil)

// NewAdam returns torch.optim.Adam, or every problem of cfg.
func NewAdam(cfg AdamConfig) (*Adam, error) { return newAdam(cfg, false) }

// NewAdamW returns torch.optim.AdamW (decoupled weight decay, default 0.01),
// or every problem of cfg.
func NewAdamW(cfg AdamConfig) (*Adam, error) {
	if cfg.WeightDecay == 0 {
		cfg.WeightDecay = 0.01
	}
	return newAdam(cfg, true)
}

func newAdam(cfg AdamConfig, decoupled bool) (*Adam, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := &Adam{cfg: cfg, decoupled: decoupled, lr: cfg.LR}
	o.st.who = "Adam"
	if decoupled {
		o.st.who = "AdamW"
	}
	o.st.names = []string{"exp_avg", "exp_avg_sq"}
	if cfg.AMSGrad {
		// torch's name for the state, which tells a checkpoint of an
		// amsgrad optimizer from a plain one on LoadState.
		o.st.names = append(o.st.names, "max_exp_avg_sq")
	}
	o.coefs()
	return o, nil
}

// Config returns the validated configuration, defaults filled in.
func (o *Adam) Config() AdamConfig { return o.cfg }

func (o *Adam) Name() string {
	if o.decoupled {
		return "adamw"
	}
	return "adam"
}

func (o *Adam) LR() float64 { return o.lr }

// SetLR sets the learning rate of the following updates. A negative or
// non-finite rate is a programming error and panics.
func (o *Adam) SetLR(lr float64) {
	checkLR(o.st.who, lr)
	o.lr = lr
	o.coefs()
}

func (o *Adam) Bind(lo, hi int) error { return o.st.bind(lo, hi) }

// Step is the number of steps begun.
func (o *Adam) Step() int64 { return o.step }

func (o *Adam) Begin() {
	o.step++
	o.coefs()
}

// coefs computes the per-step scalars exactly as torch's _single_tensor_adam
// does in Python floats (float64), then rounds them for the float32 kernels.
func (o *Adam) coefs() {
	c := o.cfg
	k := adamK64{decay: 1, b1: c.Beta1, omb1: 1 - c.Beta1, b2: c.Beta2, omb2: 1 - c.Beta2, eps: c.Eps}
	if o.decoupled {
		// torch rounds lr*wd before subtracting; the conversion keeps arm64
		// and riscv64 from fusing the two into one FMSUB.
		k.decay = 1 - float64(o.lr*c.WeightDecay)
	} else {
		k.wd = c.WeightDecay
	}
	if o.step > 0 {
		t := float64(o.step)
		bc1 := 1 - math.Pow(c.Beta1, t)
		bc2 := 1 - math.Pow(c.Beta2, t)
		k.negStep = -(o.lr / bc1)
		k.bc2s = math.Sqrt(bc2)
	}
	o.k64 = k
	o.k32 = roundAdamK[float32](k)
}

func (o *Adam) Update32(params, grads []float32, off int) {
	adamUpdate(o, "Update32", params, grads, off, &o.k32)
}

func (o *Adam) Update64(params, grads []float64, off int) {
	adamUpdate(o, "Update64", params, grads, off, &o.k64)
}

func adamUpdate[T float](o *Adam, method string, params, grads []T, off int, k *adamK[T]) {
	o.st.check(method, len(params), len(grads), off, o.step)
	s := use[T](&o.st, method)
	i := off - o.st.lo
	if o.cfg.AMSGrad {
		amsgradGo(params, grads, s[0][i:], s[1][i:], s[2][i:], k)
		return
	}
	adam(params, grads, s[0][i:], s[1][i:], k)
}

func (o *Adam) State() State {
	return State{
		Step: o.step,
		Scalars: map[string]float64{
			"lr": o.lr, "beta1": o.cfg.Beta1, "beta2": o.cfg.Beta2, "eps": o.cfg.Eps, "weight_decay": o.cfg.WeightDecay,
		},
		Buffers: o.st.export(),
		Lo:      o.st.lo, Hi: o.st.hi,
	}
}

func (o *Adam) LoadState(st State) error {
	lr, err := loadLR(o.st.who, st)
	if err != nil {
		return err
	}
	// Say which setting differs before spanState.load's general message.
	if _, has := st.Buffers["max_exp_avg_sq"]; has && !o.cfg.AMSGrad {
		return fmt.Errorf("%s.LoadState: the state holds max_exp_avg_sq, so it was saved with AdamConfig.AMSGrad: set AMSGrad to resume it", o.st.who)
	} else if !has && o.cfg.AMSGrad && st.Step > 0 {
		return fmt.Errorf("%s.LoadState: the state at step %d has no max_exp_avg_sq, so it was saved without AdamConfig.AMSGrad: leave AMSGrad unset to resume it exactly", o.st.who, st.Step)
	}
	if err := o.st.load(st); err != nil {
		return err
	}
	o.step, o.lr = st.Step, lr
	o.coefs()
	return nil
}
