package retry

import "math/rand/v2"

func randFloat() float64 { return rand.Float64() }
