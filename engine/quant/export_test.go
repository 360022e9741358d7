package quant

// For the fixture test in package quant_test.
var (
	ReadFloats        = readFloats
	CheckBitIdentical = checkBitIdentical
)
