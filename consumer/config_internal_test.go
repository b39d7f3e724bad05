package consumer

import (
	"reflect"
	"testing"
	"time"

	"github.com/keyshare/keyshare/coord"
)

// TestCoordConfigPassesTuning: every field of a Tuning that differs from
// the default in every field reaches the coord.Config the consumer joins
// with, unchanged. The fields are walked by reflection, so a knob added to
// coord.Tuning is covered without touching this test (a field of a kind it
// cannot vary fails it).
func TestCoordConfigPassesTuning(t *testing.T) {
	def := coord.DefaultTuning()
	if got := DefaultConfig().Tuning; got != def {
		t.Fatalf("DefaultConfig().Tuning = %+v, want coord.DefaultTuning() %+v", got, def)
	}
	want := def
	v := reflect.ValueOf(&want).Elem()
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		switch f.Kind() {
		case reflect.Int:
			f.SetInt(f.Int() + int64(i+1))
		case reflect.Int64: // time.Duration
			f.SetInt(f.Int() + int64(i+1)*int64(time.Millisecond))
		case reflect.Float64:
			f.SetFloat(f.Float() + float64(i+1)/8)
		case reflect.String:
			f.SetString(f.String() + "-other")
		default:
			t.Fatalf("Tuning.%s is a %s: teach this test to set it to a value other than its default", name, f.Kind())
		}
		if f.Equal(reflect.ValueOf(def).Field(i)) {
			t.Fatalf("Tuning.%s still has its default %v", name, f)
		}
	}

	cfg := DefaultConfig()
	cfg.Group, cfg.Topics, cfg.MemberID = "g", []string{"t"}, "m"
	cfg.Tuning = want
	cfg.StartTimeout = 7 * time.Second
	cc := cfg.coordConfig(nil)
	got := reflect.ValueOf(cc.Tuning)
	for i := range got.NumField() {
		if g, w := got.Field(i), v.Field(i); !g.Equal(w) {
			t.Errorf("coord.Config.%s = %v, want the consumer's %v", v.Type().Field(i).Name, g, w)
		}
	}
	if cc.StartTimeout != cfg.StartTimeout || cc.Group != "g" || cc.MemberID != "m" || !reflect.DeepEqual(cc.Topics, cfg.Topics) {
		t.Errorf("coord.Config start timeout %s, group %q, member %q, topics %v: want the consumer's %s, g, m, %v",
			cc.StartTimeout, cc.Group, cc.MemberID, cc.Topics, cfg.StartTimeout, cfg.Topics)
	}
}

// TestConfigDoesNotShadowTuning: no field of Config has the name of a
// Tuning field, which would hide the embedded one (cfg.SessionTTL would then
// set a copy the consumer never passes to coord).
func TestConfigDoesNotShadowTuning(t *testing.T) {
	tt, ct := reflect.TypeFor[coord.Tuning](), reflect.TypeFor[Config]()
	for i := range tt.NumField() {
		name := tt.Field(i).Name
		if f, ok := ct.FieldByName(name); !ok || len(f.Index) != 2 {
			t.Errorf("Config.%s is not coord.Tuning's (index %v, found %v)", name, f.Index, ok)
		}
	}
}
