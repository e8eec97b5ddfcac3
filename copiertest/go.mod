module github.com/ratekit/ratekit/copiertest

go 1.26.0
