package delegation

// CountryCentroid is the centroid of country cc (ISO 3166-1 alpha-2, upper
// case) from the table micra's distance prior uses (countryCentroids), for
// displays such as the web console's map; ok false for a code it lacks.
func CountryCentroid(cc string) (lat, lon float64, ok bool) {
	c, ok := countryCentroids[cc]
	return c[0], c[1], ok
}
