// Package peerbench measures keycap beside the libraries people use for the
// same job, in the same run. It is a module of its own so that the peers'
// code never reaches keycap's core module.
package peerbench
