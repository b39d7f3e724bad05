package main

import (
	"github.com/keyshare/keyshare/schema"
)

// groupOf names the group of schema s for coord's functions.
func groupOf(s schema.Keys) schema.Group { return schema.Group{Prefix: s.Prefix(), Name: s.Group()} }
