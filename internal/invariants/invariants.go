// Package invariants is what the build tag invariants switches on, as pebble's package of that
// name does: Enabled, which code tests to run checks of its own state, and Counter and Max, the
// counts of steps that tests bound a cost with. Built without the tag, as every user's build is,
// Enabled is false, so that the checks it guards compile to nothing, and a Counter or a Max is an
// empty struct whose methods do nothing: the counting is gone, and so are the words it took in
// the structs that keep one. A zero-size field at the end of a struct takes a word of padding
// (the address of a field may not point past its struct), so none ends one.
//
// `make test` runs the engine's tests and the root's stress tests once more with
// `-tags invariants`; the tests that read a count are built only with it.
package invariants
