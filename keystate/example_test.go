package keystate_test

import (
	"fmt"

	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
)

// A changelog record as a Kafka client would hand it over.
type changelogRecord struct {
	key, value []byte
	headers    []keystate.Header
}

func Example() {
	// The changelog so far: two changes of key "cart-7", made under
	// token 3, the second after an owner crashed before its ledger flush.
	var changelog []changelogRecord
	for _, e := range []keystate.Entry{
		{Key: []byte("cart-7"), Value: []byte("apples"), Applied: 40, Fence: 3},
		{Key: []byte("cart-7"), Value: []byte("apples,pears"), Applied: 42, Fence: 3},
	} {
		changelog = append(changelog, changelogRecord{e.Key, e.Value, keystate.Headers(e)})
	}

	// The range's next owner, under token 9, restores before it runs.
	rs, err := keystate.NewRestore(ledger.Full, keystate.DefaultConfig())
	if err != nil {
		panic(err)
	}
	for _, m := range changelog {
		e, err := keystate.Decode(m.key, m.value, m.value == nil, m.headers)
		if err != nil {
			panic(err)
		}
		if err := rs.Add(e); err != nil {
			panic(err)
		}
	}
	t, repairs, err := rs.Table(9)
	if err != nil {
		panic(err) // the table's slots failed (a disk's)
	}
	fmt.Println("repairs to append:", len(repairs))

	// The ledger had completed only offset 40, so 42 and 43 come again.
	for _, r := range []struct {
		offset int64
		item   string
	}{{42, "pears"}, {43, "plums"}} {
		key := []byte("cart-7")
		if seen, err := t.Seen(key, r.offset); err != nil {
			panic(err)
		} else if seen {
			fmt.Printf("offset %d: applied already, skipped\n", r.offset)
			continue
		}
		old, _, err := t.Get(key)
		if err != nil {
			panic(err)
		}
		e, err := t.Put(key, fmt.Appendf(nil, "%s,%s", old, r.item), r.offset, 9)
		if err != nil {
			panic(err)
		}
		fmt.Printf("offset %d: append %s with %d headers\n", r.offset, e.Value, len(keystate.Headers(e)))
	}
	// Output:
	// repairs to append: 0
	// offset 42: applied already, skipped
	// offset 43: append apples,pears,plums with 3 headers
}
