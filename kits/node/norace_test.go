//go:build !race

package nodekit_test

const raceEnabled = false
