module sundial.test/gosuite
go 1.26.0
require github.com/apache/beam/sdks/v2 v2.77.0
