package grammar

import "testing"

func TestEnumText(t *testing.T) {
	g, err := FromJSONSchema([]byte(`{"enum":["a<b&c", 1.50, null, {"k":[true]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	p := MustCompile(g)
	for _, ok := range []string{`"a<b&c"`, `1.50`, `null`, `{"k":[true]}`} {
		if !p.Valid([]byte(ok)) {
			t.Errorf("%s refused", ok)
		}
	}
	if p.Valid([]byte(`"a\u003cb&c"`)) {
		t.Error("HTML-escaped spelling accepted: the enum's text should be written as given")
	}
}
