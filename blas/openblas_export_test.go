package blas

// LoadBLISForTest loads BLIS the way Choose does (with BLIS_ARCH_TYPE set
// for this processor when unset), for the external tests.
func LoadBLISForTest() (*Native, error) { return loadBLISFor(1) }
