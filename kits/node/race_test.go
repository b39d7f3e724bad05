//go:build race

package nodekit_test

const raceEnabled = true
