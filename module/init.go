package module

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
)

// Init fills out (one value per element of a tensor of the given shape) with
// initial values drawn from r. Values are produced in float64 and converted to
// the store's dtype.
type Init func(r *rand.Rand, shape []int, out []float64)

// Zeros initialises every element to 0.
func Zeros() Init { return Constant(0) }

// Ones initialises every element to 1.
func Ones() Init { return Constant(1) }

// Constant initialises every element to v.
func Constant(v float64) Init {
	return func(_ *rand.Rand, _ []int, out []float64) {
		for i := range out {
			out[i] = v
		}
	}
}

// Uniform draws from U[lo, hi).
func Uniform(lo, hi float64) Init {
	return func(r *rand.Rand, _ []int, out []float64) {
		for i := range out {
			out[i] = lo + (hi-lo)*r.Float64()
		}
	}
}

// Normal draws from N(mean, std²).
func Normal(mean, std float64) Init {
	return func(r *rand.Rand, _ []int, out []float64) {
		for i := range out {
			out[i] = mean + std*r.NormFloat64()
		}
	}
}

// KaimingUniform is PyTorch's default for Linear and Conv weights
// (kaiming_uniform with a=sqrt(5)): U(-b, b) with b = 1/sqrt(fanIn).
func KaimingUniform(fanIn int) Init {
	b := 1 / math.Sqrt(float64(max(fanIn, 1)))
	return Uniform(-b, b)
}

// KaimingNormal draws from N(0, 2/fanIn), the He initialisation for ReLU nets.
func KaimingNormal(fanIn int) Init {
	return Normal(0, math.Sqrt(2/float64(max(fanIn, 1))))
}

// GlorotUniform draws from U(-b, b) with b = sqrt(6/(fanIn+fanOut)).
func GlorotUniform(fanIn, fanOut int) Init {
	b := math.Sqrt(6 / float64(max(fanIn+fanOut, 1)))
	return Uniform(-b, b)
}

// rngFor gives each named tensor its own stream, so initial values depend on
// (seed, name) only and not on declaration order.
func rngFor(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}
