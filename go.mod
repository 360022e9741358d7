module github.com/redlite/batch

go 1.26
