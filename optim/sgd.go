package optim

import "fmt"

// SGDConfig configures SGD. The zero value of every field except LR means
// "off", as in torch.optim.SGD.
type SGDConfig struct {
	// LR is the learning rate; it must be > 0 (there is no default).
	LR float64
	// Momentum in [0, 1); 0 disables the momentum buffer.
	Momentum float64
	// Dampening in [0, 1] scales the gradient added to the momentum buffer
	// by 1 - Dampening (not on the first step, where the buffer is the
	// gradient, as in torch).
	Dampening float64
	// Nesterov uses Nesterov momentum; it needs Momentum > 0 and Dampening 0.
	Nesterov bool
	// WeightDecay >= 0 adds WeightDecay*param to the gradient (coupled L2).
	WeightDecay float64
}

// Validate returns every problem of the configuration at once.
func (c *SGDConfig) Validate() error {
	var p problems
	if !finite(c.LR) || c.LR <= 0 {
		p.addf("SGDConfig.LR is %v: set a learning rate > 0, such as 0.01", c.LR)
	}
	if !(c.Momentum >= 0 && c.Momentum < 1) {
		p.addf("SGDConfig.Momentum is %v: use a value in [0, 1), such as 0.9, or 0 for none", c.Momentum)
	}
	if !(c.Dampening >= 0 && c.Dampening <= 1) {
		p.addf("SGDConfig.Dampening is %v: use a value in [0, 1], usually 0", c.Dampening)
	}
	if !finite(c.WeightDecay) || c.WeightDecay < 0 {
		p.addf("SGDConfig.WeightDecay is %v: use a value >= 0, such as 1e-4, or 0 for none", c.WeightDecay)
	}
	if c.Nesterov && (c.Momentum == 0 || c.Dampening != 0) {
		p.addf("SGDConfig.Nesterov is true with Momentum %v and Dampening %v: Nesterov momentum needs Momentum > 0 and Dampening 0", c.Momentum, c.Dampening)
	}
	return p.err()
}

// SGD is stochastic gradient descent with optional momentum, dampening,
// Nesterov momentum and coupled weight decay: torch.optim.SGD.
//
//	d = g + wd*p
//	buf = d (step 1);  buf = momentum*buf + (1-dampening)*d (later steps)
//	d = d + momentum*buf (Nesterov)  or  d = buf
//	p = p - lr*d
type SGD struct {
	cfg  SGDConfig
	lr   float64
	step int64
	st   spanState
	k64  sgdK64
	k32  sgdK32
}

var _ Optimizer = (*SGD)(nil)

// NewSGD returns an SGD optimizer, or every problem of cfg.
func NewSGD(cfg SGDConfig) (*SGD, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := &SGD{cfg: cfg, lr: cfg.LR}
	o.st.who = "SGD"
	if cfg.Momentum != 0 {
		o.st.names = []string{"momentum_buffer"}
	}
	o.coefs()
	return o, nil
}

// Config returns the validated configuration.
func (o *SGD) Config() SGDConfig { return o.cfg }

func (o *SGD) Name() string { return "sgd" }
func (o *SGD) LR() float64  { return o.lr }

// SetLR sets the learning rate of the following updates. A negative or
// non-finite rate is a programming error and panics.
func (o *SGD) SetLR(lr float64) {
	checkLR("SGD", lr)
	o.lr = lr
	o.coefs()
}

func (o *SGD) Bind(lo, hi int) error { return o.st.bind(lo, hi) }

// Step is the number of steps begun.
func (o *SGD) Step() int64 { return o.step }

func (o *SGD) Begin() {
	o.step++
	o.coefs()
}

// coefs computes the per-step constants in float64 and rounds them to
// float32 for the float32 kernels, as torch does with Python floats.
func (o *SGD) coefs() {
	c := o.cfg
	o.k64 = sgdK64{wd: c.WeightDecay, mom: c.Momentum, omd: 1 - c.Dampening, negLR: -o.lr, first: o.step == 1, nesterov: c.Nesterov}
	o.k32 = roundSGDK[float32](o.k64)
}

func (o *SGD) Update32(params, grads []float32, off int) {
	sgdUpdate(o, "Update32", params, grads, off, &o.k32)
}

func (o *SGD) Update64(params, grads []float64, off int) {
	sgdUpdate(o, "Update64", params, grads, off, &o.k64)
}

func sgdUpdate[T float](o *SGD, method string, params, grads []T, off int, k *sgdK[T]) {
	o.st.check(method, len(params), len(grads), off, o.step)
	if o.cfg.Momentum == 0 {
		sgdPlain(params, grads, k)
		return
	}
	buf := use[T](&o.st, method)[0][off-o.st.lo:]
	sgdMomentum(params, grads, buf, k)
}

func (o *SGD) State() State {
	nest := 0.0
	if o.cfg.Nesterov {
		nest = 1
	}
	return State{
		Step: o.step,
		Scalars: map[string]float64{
			"lr": o.lr, "momentum": o.cfg.Momentum, "dampening": o.cfg.Dampening,
			"nesterov": nest, "weight_decay": o.cfg.WeightDecay,
		},
		Buffers: o.st.export(),
		Lo:      o.st.lo, Hi: o.st.hi,
	}
}

func (o *SGD) LoadState(st State) error {
	lr, err := loadLR("SGD", st)
	if err != nil {
		return err
	}
	if err := o.st.load(st); err != nil {
		return err
	}
	o.step, o.lr = st.Step, lr
	o.coefs()
	return nil
}

func checkLR(who string, lr float64) {
	if !finite(lr) || lr < 0 {
		panic(fmt.Sprintf("optim: %s.SetLR(%v): a learning rate is finite and >= 0", who, lr))
	}
}
