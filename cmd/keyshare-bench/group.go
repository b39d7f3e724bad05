package main

import (
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/keys"
)

// groupOf names the group of schema s for coord's functions.
func groupOf(s keys.Schema) coord.Group { return coord.Group{Prefix: s.Prefix(), Name: s.Group()} }
