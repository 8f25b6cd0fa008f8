package rocksshared

// CHeapInUse is cHeapInUse, for the tests of package rocksshared_test.
var CHeapInUse = cHeapInUse

// CheckLayout is checkLayout, for the tests of package rocksshared_test.
var CheckLayout = checkLayout
