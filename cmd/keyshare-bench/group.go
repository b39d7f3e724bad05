package main

import (
	"github.com/keyshare/keyshare/internal/keys"
	"github.com/keyshare/keyshare/state"
)

// groupOf names the group of schema s for coord's functions.
func groupOf(s keys.Schema) state.Group { return state.Group{Prefix: s.Prefix(), Name: s.Group()} }
